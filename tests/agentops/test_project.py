"""The project as its users first meet it: production settings, the admin, the services."""

from __future__ import annotations

import io
import json
import os
import re
import secrets
import subprocess
import sys
import uuid
from pathlib import Path

import django_rq
import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client, override_settings

from agentops.effects import DemoTask, TaskLink, registry
from journal.leases import lease_acquire
from journal.models import Task
from journal.record import step_record, task_create
from tests.journal.support import ChargeTool, Provider, charge, invoice

ROOT = Path(__file__).resolve().parents[2]


def _manage(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "agentops.settings", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_check_deploy_is_clean_with_production_settings() -> None:
    # A deployment names its providers (the shipped kinds' mail and bookings APIs, and the
    # example's, which the tests install): without them the start-up checks warn (W117).
    providers = {
        "MAIL_API_BASE": "https://mail.example.com",
        "BOOKINGS_API_BASE": "https://bookings.example.com",
        "SUPPORT_API_BASE": "https://support.example.com",
    }
    result = _manage(
        "check",
        "--deploy",
        "--fail-level",
        "WARNING",
        DJANGO_DEBUG="0",
        DJANGO_SECRET_KEY=secrets.token_urlsafe(50),
        **providers,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_a_provider_left_unset_is_warned_about_at_start_up() -> None:
    result = _manage(
        "check",
        "--deploy",
        "--fail-level",
        "WARNING",
        DJANGO_DEBUG="0",
        DJANGO_SECRET_KEY=secrets.token_urlsafe(50),
        BOOKINGS_API_BASE="",
    )
    assert result.returncode != 0
    assert "agentops.W117" in result.stderr and "BOOKINGS_API_BASE is not set" in result.stderr


GIFTCARDS = """
from agentops import effects


@effects.register_tool
class IssueCard(effects.HttpTool):
    name = "giftcard_issue"
    description = "Issue a gift card, once per order."
    schema = effects.refs_object({"order": {"type": "string"}}, ["order"])
    base_setting = "GIFTCARD_API_BASE"
    key_lifetime_setting = "GIFTCARD_KEY_LIFETIME_SECONDS"
    path = "/v1/cards"
    key_field = "reference"
    lookup_path = "/v1/cards"
    evidence = ("id",)


binds = {"giftcard_issue": (effects.Ref("order", "order"),)}
effects.register_kind(effects.Kind("giftcard", "A card for an order.", IssueCard.schema, binds))


@effects.register_playbook("giftcard")
def giftcard(facts):
    if not facts.steps:
        return effects.Call("giftcard_issue", {"order": facts.refs["order"]})
    return effects.Finish(facts.steps[-1].result_text())
"""


def test_your_own_app_is_installed_by_naming_it_without_a_settings_module(tmp_path: Path) -> None:
    """AGENTOPS_APPS installs an app of one's own (found on PYTHONPATH), whose tool's settings
    come from the environment; one left out is a check error that names it; a name that is not
    one stops the start with a sentence."""
    app = tmp_path / "giftcards"
    app.mkdir()
    (app / "__init__.py").write_text("")
    (app / "effects.py").write_text(GIFTCARDS)
    env = {
        "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        "AGENTOPS_APPS": "giftcards",
        "GIFTCARD_API_BASE": "http://127.0.0.1:9",
        "GIFTCARD_KEY_LIFETIME_SECONDS": "86400",
    }
    listed = _manage(
        "shell", "-c", "from agentops.effects import kinds, tools; print(sorted(kinds()))", **env
    )
    assert listed.returncode == 0, listed.stderr
    assert "'giftcard'" in listed.stdout
    assert _manage("check", **env).returncode == 0
    missing = _manage("check", **{**env, "GIFTCARD_KEY_LIFETIME_SECONDS": ""})
    assert missing.returncode != 0
    assert "agentops.E118" in missing.stderr and "Traceback" not in missing.stderr
    assert "GIFTCARD_KEY_LIFETIME_SECONDS is '', not a number of seconds" in missing.stderr
    wrong = _manage("check", **{**env, "AGENTOPS_APPS": "giftcards; rm -rf"})
    assert wrong.returncode != 0
    assert "AGENTOPS_APPS: 'giftcards; rm -rf' is not an app's dotted name" in wrong.stderr


def test_production_settings_refuse_to_start_without_a_secret() -> None:
    result = _manage("check", DJANGO_DEBUG="0", DJANGO_SECRET_KEY="")
    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY must be set" in result.stderr


def test_settings_refuse_to_start_without_a_database() -> None:
    result = _manage("check", DJANGO_DEBUG="1", DATABASE_URL="")
    assert result.returncode != 0
    assert "DATABASE_URL is not set" in result.stderr


@pytest.mark.usefixtures("committed")
def test_the_admin_shows_the_journal_behind_a_login() -> None:
    client = Client()
    assert client.get("/admin/").status_code == 302  # to the login page
    assert client.get("/admin/login/").status_code == 200

    user = get_user_model().objects.create_superuser(
        username=f"op-{secrets.token_hex(4)}", email="op@example.com", password="pw-for-tests"
    )
    client.force_login(user)
    index = client.get("/admin/").content.decode()
    for name in ("Tasks", "Steps", "Entries"):
        assert f">{name}<" in index

    task = task_create(kind="renewal", goal="charge INV for the admin test")
    lease = lease_acquire(task_id=task.pk, owner="admin-test")
    assert lease is not None
    inv = invoice()
    step = step_record(lease=lease, decision=charge(inv), tools={"charge": ChargeTool(Provider())})
    page = client.get(f"/admin/journal/task/{task.pk}/change/")
    assert page.status_code == 200
    assert step.key in page.content.decode()
    entries = client.get(f"/admin/journal/entry/?task__id__exact={task.pk}").content.decode()
    assert "step recorded" in entries and "attempt started" in entries
    # The journal is read-only in the admin: no add, change or delete of entries.
    assert client.get("/admin/journal/entry/add/").status_code == 403


@pytest.mark.usefixtures("committed")
def test_demo_seed_creates_the_operator_once_and_prints_the_password_once() -> None:
    first, second = io.StringIO(), io.StringIO()
    call_command("demo_seed", stdout=first)
    call_command("demo_seed", stdout=second)
    operator = get_user_model().objects.get(username="operator")
    assert operator.is_superuser and operator.is_staff
    printed = re.search(r"operator / (\S+) ", first.getvalue() + second.getvalue())
    if printed:  # this session created it: the printed password is the real one
        assert operator.check_password(printed.group(1))
    assert "exists" in second.getvalue()
    assert " / " not in second.getvalue()
    # The demo tasks are started once, through the normal service (so their runs are queued).
    demo = Task.objects.filter(goal__startswith="Demo:", kind__in=("renewal", "trip", "reminders"))
    kinds = sorted(demo.values_list("kind", flat=True))
    assert kinds == ["reminders", "renewal", "renewal", "trip", "trip"]
    queued = [job.args[0] for job in django_rq.get_queue("default").get_jobs()]
    assert {str(pk) for pk in demo.values_list("pk", flat=True)} <= set(queued)


@pytest.mark.usefixtures("committed")
def test_demo_seed_starts_the_demo_the_installed_apps_declare(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The core's command knows no kind and no page: it starts the demo tasks the installed
    apps declare (effects.register_demo), and the summary links the pages their links give."""
    one, two = (f"T-{uuid.uuid4().hex[:8]}" for _ in range(2))
    refs = {"order": "O-5", "email": "ada@example.com", "amount": 500, "currency": "eur"}
    ticket = DemoTask(
        kind="goodwill",
        goal=f"make good on ticket {one}",
        refs={**refs, "ticket": one},
        name=one,
        shows="credit issued",
    )
    unnamed = DemoTask(
        kind="goodwill", goal=f"make good on ticket {two}", refs={**refs, "ticket": two}
    )
    monkeypatch.setattr(registry, "demos", [ticket, unnamed])
    page = TaskLink(label="Ticket page", url=lambda task: f"/tickets/{task.refs['ticket']}/")
    monkeypatch.setattr(registry, "links", [page])
    out = io.StringIO()
    with override_settings(AGENTOPS_BASE_URL="http://h"):
        call_command("demo_seed", "--summary", stdout=out)
    summary = json.loads(out.getvalue())
    goals = [f"Demo: make good on ticket {one}", f"Demo: make good on ticket {two}"]
    started = Task.objects.filter(goal__in=goals).order_by("created_at")
    assert [(t.kind, t.goal, t.refs["ticket"]) for t in started] == [
        ("goodwill", goals[0], one),
        ("goodwill", goals[1], two),
    ]
    # Only the task that says what it shows is in the summary, named as its app named it.
    assert summary["pages"] == [
        {
            "task": one,
            "label": "Ticket page",
            "shows": "credit issued",
            "url": f"http://h/tickets/{one}/",
        }
    ]
    # Started once: a second run starts nothing more.
    call_command("demo_seed", stdout=io.StringIO())
    assert Task.objects.filter(goal__in=goals).count() == 2


def test_the_core_names_none_of_the_shipped_kinds_demo() -> None:
    """The demo's renewals and trips are the shipped kinds' app's (commerce/demo.py)."""
    command = (ROOT / "agentops/management/commands/demo_seed.py").read_text()
    named = re.findall(
        r"\b(invoices?|renewals?|trips?|reminders?|INV-\d+|TRIP-\d+)\b", command, re.I
    )
    assert named == []


def test_redis_is_a_real_server() -> None:
    redis = django_rq.get_connection("default")
    assert redis.ping()
    info = redis.info("server")
    assert info["redis_version"] and info["tcp_port"] > 0
