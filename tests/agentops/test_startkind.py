"""``manage.py startkind`` (docs/your-own/startkind.md): the app it writes is installed the
documented way (``AGENTOPS_APPS``, on ``PYTHONPATH``, no settings module of its own), its own
tests pass as written, and a task of its kind, started from the command line and run by a
worker, settles a timeout after acting by a lookup — one effect at its sandbox — while a
second task for the same order is refused with the first one's evidence."""

from __future__ import annotations

import fnmatch
import io
import json
import os
import re
import subprocess
import sys
import time
import tomllib
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from agentops.workers import WORKER_ARGS
from devtools.database import database_url
from devtools.process import Popen, end, spawn
from journal.models import Step, Task
from sandbox.client import SandboxClient
from tests.agentops.workers import quiet_world

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "agentops" / "kind_template"
OVER = ("finished", "compensated", "cancelled", "needs_human", "awaiting_approval")


def startkind(*args: str) -> str:
    out = io.StringIO()
    call_command("startkind", *args, stdout=out)
    return out.getvalue()


def installed(where: Path, **more: str) -> dict[str, str]:
    """The environment of a process with the app installed as the page says: its folder on
    PYTHONPATH, its name in AGENTOPS_APPS, its settings in the environment."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            p for p in (str(where), str(ROOT), os.environ.get("PYTHONPATH", "")) if p
        ),
        "AGENTOPS_APPS": "giftcard",
        "DJANGO_SETTINGS_MODULE": "agentops.settings_test",
        "PYTHONUNBUFFERED": "1",
        **more,
    }
    # As the app's own role, like a worker in production: the tables are made already.
    env.pop("DATABASE_OWNER_URL", None)
    return env


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("2cards", "'2cards' is not a valid name: use letters, digits and underscores"),
        ("gift-card", "'gift-card' is not a valid name: use letters, digits and underscores"),
        ("GiftCard", "use a lower-case name that is not a Python keyword"),
        ("class", "use a lower-case name that is not a Python keyword"),
        ("json", "'json' conflicts with the name of an existing Python module"),
        ("agentops", "'agentops' conflicts with the name of an existing Python module"),
    ],
)
def test_a_name_that_cannot_be_an_app_is_refused_and_nothing_is_written(
    tmp_path: Path, name: str, said: str
) -> None:
    with pytest.raises(CommandError, match=said):
        startkind(name, str(tmp_path))
    assert list(tmp_path.iterdir()) == []


def test_an_existing_directory_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    mine = tmp_path / "giftcard"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    with pytest.raises(CommandError, match="giftcard already exists: nothing was written"):
        startkind("giftcard", str(tmp_path))
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]
    with pytest.raises(CommandError, match="is not a directory"):
        startkind("giftcard", str(tmp_path / "nowhere"))
    with pytest.raises(CommandError, match="--port 70000 is not a port"):
        startkind("gift_card", str(tmp_path), "--port", "70000")
    assert [p.name for p in tmp_path.iterdir()] == ["giftcard"]


def test_the_templates_are_shipped_in_the_wheel() -> None:
    """Every file of the template is named by the package data of pyproject.toml."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["agentops"]
    files = [p.relative_to(ROOT / "agentops").as_posix() for p in TEMPLATE.rglob("*")]
    files = [f for f in files if (ROOT / "agentops" / f).is_file() and "__pycache__" not in f]
    assert files and all(f.endswith("-tpl") for f in files)
    assert [f for f in files if not any(fnmatch.fnmatch(f, p) for p in patterns)] == []


def test_the_app_is_written_whole_and_passes_the_linter(tmp_path: Path) -> None:
    said = startkind("giftcard", str(tmp_path))
    app = tmp_path / "giftcard"
    assert f"{app}: the app giftcard" in said and "AGENTOPS_APPS=giftcard" in said
    assert sorted(p.relative_to(app).as_posix() for p in app.rglob("*") if p.is_file()) == [
        "README.md",
        "__init__.py",
        "apps.py",
        "effects.py",
        "kinds.py",
        "sandbox.py",
        "tests/__init__.py",
        "tests/conftest.py",
        "tests/test_giftcard.py",
        "tools.py",
    ]
    assert "{{" not in "".join(p.read_text() for p in app.rglob("*") if p.is_file())
    tools = (app / "tools.py").read_text()
    assert "base_setting = BASE_SETTING" in tools and '"GIFTCARD_API_BASE"' in tools
    assert '"GIFTCARD_KEY_LIFETIME_SECONDS"' in tools
    startkind("gift_card", str(tmp_path), "--port", "8121")  # a name in two words
    two = tmp_path / "gift_card"
    assert "class IssueGiftCard(HttpTool):" in (two / "tools.py").read_text()
    assert '"GIFT_CARD_API_BASE"' in (two / "tools.py").read_text()
    assert "port=8121," in (two / "effects.py").read_text()
    for made in (app, two):
        linted = subprocess.run(
            [sys.executable, "-m", "ruff", "check", "--config", str(ROOT / "pyproject.toml")]
            + [str(made)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert linted.returncode == 0, linted.stdout + linted.stderr


def test_a_missing_setting_stops_the_check_with_the_sentence_on_the_page(
    committed: None, tmp_path: Path
) -> None:
    page = (ROOT / "docs" / "your-own" / "startkind.md").read_text()
    [said] = re.findall(r"```text\n(.*?)\n```", page, re.DOTALL)
    startkind("giftcard", str(tmp_path))
    env = installed(
        tmp_path,
        DATABASE_URL=database_url(),
        DJANGO_SETTINGS_MODULE="agentops.settings",  # as in use (the test settings: short leases)
        GIFTCARD_API_BASE="http://127.0.0.1:9",
    )
    env.pop("GIFTCARD_KEY_LIFETIME_SECONDS", None)
    checked = manage(env, "check")
    assert checked.returncode != 0 and said in checked.stderr, checked.stderr
    assert "Traceback" not in checked.stderr
    fine = manage({**env, "GIFTCARD_KEY_LIFETIME_SECONDS": "86400"}, "check")
    assert fine.returncode == 0, fine.stderr


@pytest.mark.timeout(300)
def test_its_own_tests_pass_installed_the_documented_way(committed: None, tmp_path: Path) -> None:
    """Its tests, run by pytest in a process of its own with the app installed by
    AGENTOPS_APPS, on this suite's test database (made and migrated already)."""
    startkind("giftcard", str(tmp_path))
    env = installed(tmp_path, DATABASE_URL=database_url(), AGENTOPS_TEST_DATABASE_READY="1")
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml")]
        + [str(tmp_path / "giftcard" / "tests"), "-p", "no:randomly", "-q", "--tb=short"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert ran.returncode == 0, ran.stdout[-5000:] + ran.stderr[-3000:]
    assert "5 passed" in ran.stdout, ran.stdout[-2000:]


@pytest.fixture
def giftcard(committed: None, tmp_path: Path) -> Iterator[tuple[Path, str, SandboxClient]]:
    """The app, written by startkind, and its sandbox as a process of its own."""
    startkind("giftcard", str(tmp_path))
    sandbox = subprocess.Popen(
        [sys.executable, "-m", "giftcard.sandbox", "--port", "0"],
        env=installed(tmp_path),
        stdout=subprocess.PIPE,
        text=True,
    )
    assert sandbox.stdout is not None
    line = sandbox.stdout.readline()
    assert line.startswith("ready on "), line
    url = line.split()[-1]
    yield tmp_path, url, SandboxClient(url)
    sandbox.terminate()
    sandbox.wait(timeout=10)


def manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def ended(task_id: str, timeout: float = 60) -> Task:
    deadline = time.monotonic() + timeout
    while (task := Task.objects.get(pk=task_id)).status not in OVER:
        assert time.monotonic() < deadline, f"task {task_id} still {task.status}"
        time.sleep(0.1)
    return task


@pytest.mark.timeout(240)
def test_a_task_settles_a_timeout_by_lookup_and_a_second_for_the_order_is_refused(
    giftcard: tuple[Path, str, SandboxClient],
) -> None:
    where, url, provider = giftcard
    provider.fault("giftcards.create", "latency_after_effect", delay=1.5, times=1)
    settings = {
        "GIFTCARD_API_BASE": url,
        "GIFTCARD_KEY_LIFETIME_SECONDS": "86400",
        "PLANNER": "scripted",
        "TOOL_TIMEOUT_SECONDS": "0.5",
        "RECONCILE_SCHEDULE": "0.2,0.3,0.5,0.5,1,1,2,2,2",
    }
    env = installed(where, DATABASE_URL=database_url(), **settings)
    checked = manage(env, "check")
    assert checked.returncode == 0, checked.stderr
    listed = manage(env, "sandboxes")  # what `make run` starts
    assert listed.returncode == 0, listed.stderr
    [declared] = [s for s in json.loads(listed.stdout) if s["name"] == "giftcard"]
    assert (declared["module"], declared["port"], declared["unless"]) == (
        "giftcard.sandbox",
        8120,
        "GIFTCARD_API_BASE",
    )
    quiet_world()  # no other test's task left for this worker to take
    worker: Popen = spawn(
        [sys.executable, "manage.py", *WORKER_ARGS],
        env=installed(where, DATABASE_URL=database_url("worker"), **settings),
        output=where / "worker.log",
    )
    try:
        order = f"ORD-{uuid.uuid4().hex[:10]}"
        refs = {"order": order, "email": "ada@example.com", "amount": 2500, "currency": "eur"}
        ids = []
        for goal in ("A gift card for the order", "Another gift card for the same order"):
            started = manage(
                env, "start_task", "giftcard", "--goal", goal, "--refs", json.dumps(refs)
            )
            assert started.returncode == 0, started.stderr
            ids.append(started.stdout.strip())
            ended(ids[-1])
    finally:
        end(worker, timeout=30)
    first, second = (Task.objects.get(pk=task_id) for task_id in ids)
    assert first.status == "finished", (first.attention, (where / "worker.log").read_text()[-3000:])
    step = Step.objects.get(task=first, tool="giftcard_issue")
    # The reply came too late: unknown, then found by its key, never sent again.
    assert (step.state, step.attempts) == ("done", 1) and step.lookups >= 1
    fired = [f for f in provider.fault_log() if f["operation"] == "giftcards.create"]
    assert [f["key"] for f in fired] == [step.key]
    made = [
        e for e in provider.ledger(operation="giftcards.create") if e["params"]["order"] == order
    ]
    assert [(e["key"], e["object_id"]) for e in made] == [(step.key, step.evidence["id"])]
    refused = Step.objects.get(task=second, tool="giftcard_issue")
    assert (refused.state, refused.refusal) == ("not_done", "already_done")
    assert refused.detail.startswith(f"already done: giftcard_issue for {order}")
    assert f"(id {step.evidence['id']})" in refused.detail
    assert refused.outcome["first_evidence"] == step.evidence
    assert len(provider.ledger(operation="giftcards.create", reference=step.key)) == 1
