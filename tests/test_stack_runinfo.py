"""`stack.py manage` finds the servers `make run` started, and `make run` ends its start-up
with a short summary (issue 21)."""

from __future__ import annotations

import io
import json
import stat
from pathlib import Path

import pytest
from django.core.management import call_command
from django.test import override_settings

from devtools.stack import base
from devtools.stack.cli import summary_lines
from devtools.stack.runinfo import manage_environment, run_file, run_info, run_info_write


@pytest.fixture
def var(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(base, "VAR", tmp_path)
    return tmp_path


def test_run_records_its_ports_and_settings_owner_only_and_without_secrets(var: Path) -> None:
    run_info_write(
        ports={"AGENTOPS_PG_PORT": 15432, "AGENTOPS_REDIS_PORT": 16379, "AGENTOPS_WEB_PORT": 18000},
        settings={
            "STRIPE_API_BASE": "http://127.0.0.1:18101",
            "STRIPE_WEBHOOK_SECRET": "whsec_x",
            "DATABASE_URL": "postgres://app:pw@127.0.0.1:15432/agentops",
            "DJANGO_SECRET_KEY": "k",
        },
        given=[],
    )
    assert run_file() == var / "run" / "stack.json"
    assert stat.S_IMODE(run_file().stat().st_mode) == 0o600
    text = run_file().read_text()
    assert "whsec_x" not in text and "pw@" not in text and '"k"' not in text
    assert run_info()["settings"] == {"STRIPE_API_BASE": "http://127.0.0.1:18101"}


def test_manage_takes_runs_ports_and_settings_unless_it_is_given_its_own(var: Path) -> None:
    run_info_write(
        ports={"AGENTOPS_PG_PORT": 15432, "AGENTOPS_REDIS_PORT": 16379, "AGENTOPS_WEB_PORT": 18000},
        settings={"MAIL_API_BASE": "http://127.0.0.1:18102", "AGENTOPS_BASE_URL": "http://x"},
        given=[],
    )
    env = {"AGENTOPS_REDIS_PORT": "6400", "AGENTOPS_BASE_URL": "https://ops.example.com"}
    assert manage_environment(env, run_info()) == ""
    assert env["AGENTOPS_PG_PORT"] == "15432"  # as `run` started it
    assert env["AGENTOPS_REDIS_PORT"] == "6400"  # set here: kept
    assert env["MAIL_API_BASE"] == "http://127.0.0.1:18102"
    assert env["AGENTOPS_BASE_URL"] == "https://ops.example.com"
    # No run yet: nothing is filled in, the defaults stand.
    run_file().unlink()
    fresh: dict[str, str] = {}
    assert manage_environment(fresh, run_info()) == "" and fresh == {}


def test_manage_says_what_to_set_when_run_was_given_its_servers(var: Path) -> None:
    run_info_write(ports={}, settings={}, given=["DATABASE_URL"])
    said = manage_environment({}, run_info())
    assert "set the same DATABASE_URL" in said
    assert manage_environment({"DATABASE_URL": "postgres://elsewhere"}, run_info()) == ""


def test_the_summary_names_the_address_the_login_and_the_customers_pages() -> None:
    pages = [
        {
            "task": "INV-2292",
            "label": "Customer's page",
            "shows": "declined",
            "url": "http://h/pay/t/",
        }
    ]
    first = "\n".join(
        summary_lines("http://h", {"login": "operator", "password": "pw-1", "pages": pages})
    )
    assert "agentops is up at http://h/" in first
    assert "log in as operator, password pw-1" in first and "http://h/pay/t/" in first
    assert "  customer's page of INV-2292 (declined):" in first.splitlines()
    later = "\n".join(summary_lines("http://h", {"login": "operator", "password": None}))
    assert "password shown on the first run" in later and "changepassword operator" in later
    assert len(first.splitlines()) <= 10  # short


@pytest.mark.usefixtures("committed")
@override_settings(AGENTOPS_BASE_URL="http://127.0.0.1:8000")
def test_demo_seed_summary_is_one_json_object_with_the_demo_customers_pages() -> None:
    from commerce.customers.links import link_of

    out = io.StringIO()
    call_command("demo_seed", "--summary", stdout=out)
    summary = json.loads(out.getvalue())  # nothing else was printed
    assert summary["login"] == "operator"
    [declined, paid] = summary["pages"]
    assert declined["task"] == "INV-2292" and paid["task"] == "INV-2291"
    assert declined["label"] == paid["label"] == "Customer's page"
    assert declined["shows"] == "declined: pay with another card" and paid["shows"] == "paid"
    prefix = "http://127.0.0.1:8000/pay/"
    assert declined["url"].startswith(prefix)
    link = link_of(declined["url"].removeprefix(prefix).rstrip("/"))
    assert link.problem is None and link.invoice == "INV-2292" and link.task_id
