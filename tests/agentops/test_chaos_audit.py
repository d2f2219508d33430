"""The chaos run's audit and verdict (issues 12, 16): the journal against the ledgers,
when a run passes, and ``manage.py chaos`` saying why it does not.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import override_settings

from agentops.effects import task_start
from agentops.kinds import rules_for, tools_for
from agentops.planners.scripted import ScriptedPlanner as Playbooks
from agentops.runner import task_policy
from devtools.chaos.audit import audit_journal
from devtools.chaos.ledgers import Ledgers
from devtools.chaos.plan import plan_make
from devtools.chaos.report import MUST_BE_ZERO, verdict
from devtools.management.commands.chaos import Command
from journal.models import Step
from journal.run import task_advance
from tests.agentops.workers import quiet_world
from tests.journal.support import invoice
from tests.sandbox.fixtures import SandboxHandle

pytestmark = pytest.mark.usefixtures("committed", "clean_faults")


@pytest.fixture
def on_providers(on_sandbox: dict[str, Any]) -> Iterator[None]:
    with override_settings(**on_sandbox, TOOL_TIMEOUT_SECONDS=1.0, PLANNER="scripted"):
        yield


def test_the_audit_counts_an_effect_a_provider_performed_twice_under_one_key(
    on_providers: None, payments_sandbox: SandboxHandle, mail_sandbox: SandboxHandle
) -> None:
    quiet_world()
    inv = invoice()
    task = task_start(
        kind="renewal", goal="renew", refs={"invoice": inv, "amount": 4900, "email": "a@b.ch"}
    )
    task_advance(
        task_id=task.pk,
        planner=Playbooks(),
        tools=tools_for(task),
        policy=task_policy(task),
        rules=rules_for(task),
    )
    charge = Step.objects.get(task=task, n=1)
    mail = Step.objects.get(task=task, n=2)
    [paid] = payments_sandbox.client.ledger(key=charge.key)
    [sent] = mail_sandbox.client.ledger(key=mail.key)
    charges = {charge.evidence["charge"]: charge.evidence["payment_intent"]}
    honest = Ledgers(entries={"payments": [paid], "mail": [sent]}, fault_logs={}, charges=charges)
    plan = plan_make(seed=1, tasks=1, run="unused")
    figures = audit_journal(plan=plan, task_ids=[str(task.pk)], ledgers=honest, hits=[])
    # No agent is answered here (the mcp harness's figure): None, as "cannot tell", not 0.
    told = {name for name in MUST_BE_ZERO if name not in ("business_duplicates", "untrue_answers")}
    assert {name: figures[name] for name in told} == dict.fromkeys(told, 0)
    assert figures["untrue_answers"] is None
    # The same charge twice under the step's key, as a retry after the key died would do.
    twice = Ledgers(
        entries={"payments": [paid, {**paid, "object_id": "pi_again"}], "mail": [sent]},
        fault_logs={},
        charges=charges,
    )
    figures = audit_journal(plan=plan, task_ids=[str(task.pk)], ledgers=twice, hits=[])
    assert figures["duplicates"] == 1 and figures["journal_mismatch"] == 1
    # Its summary names one charge; the provider shows two.
    assert figures["untrue_summaries"] == 1, figures["examples"]
    assert "does not mention charge_customer pi_again" in figures["examples"]["untrue_summaries"][0]


def _flagged(task: str, *, on_purpose: bool) -> dict[str, Any]:
    reason = "step ao:x:1 (charge_customer): the provider refused us (421)"
    return {"task": task, "code": "misconfigured", "reason": reason, "on_purpose": on_purpose}


def test_a_task_left_to_a_person_fails_the_run_unless_the_plan_meant_it() -> None:
    zeros: dict[str, Any] = dict.fromkeys(MUST_BE_ZERO, 0)
    passing = {**zeros, "needs_human_on_purpose": 0, "needs_human_expected": 0, "flagged": []}
    assert verdict(passing) == []
    # Every task handed to a person, none on purpose: the regression the criterion catches.
    everyone = {**passing, "needs_human": 30, "flagged": [_flagged("t1", on_purpose=False)]}
    [why] = verdict(everyone)
    assert why.startswith("needs_human is 30, not 0: tasks need a person that the plan did not")
    assert "t1 [misconfigured] step ao:x:1" in why
    # A refusal the plan makes on purpose is expected, exactly.
    meant = {**passing, "needs_human_on_purpose": 1, "needs_human_expected": 1}
    assert verdict(meant) == []
    assert verdict({**meant, "needs_human_on_purpose": 0}) == [
        "needs_human_on_purpose is 0: the plan refuses us for 1 charge(s), and each such "
        "task, and only it, must be left to a person"
    ]
    assert verdict({**passing, "unknown_open": 2})[0].startswith("unknown_open is 2, not 0")


def test_manage_py_chaos_exits_non_zero_and_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    figures: dict[str, Any] = {
        **dict.fromkeys(MUST_BE_ZERO, 0),
        "needs_human": 1,
        "flagged": [_flagged("t1", on_purpose=False)],
        "needs_human_on_purpose": 0,
        "needs_human_expected": 0,
        "seed": 1,
        "harness": "safe",
        "tasks": 1,
        "steps": 1,
        "intended_effects": 1,
        "provider_effects": 0,
        "outcomes": {"needs_human": 1},
        "faults_injected": {},
        "recovery_s": {},
        "wall_s": 1.0,
        "workdir": "var/chaos/x",
    }
    figures["failed"] = verdict(figures)
    figures["ok"] = False
    monkeypatch.setattr("devtools.management.commands.chaos.chaos_run", lambda **_: figures)
    out, err = io.StringIO(), io.StringIO()
    command = Command(stdout=out, stderr=err)
    options = vars(command.create_parser("manage.py", "chaos").parse_args(["--json"]))
    with pytest.raises(SystemExit) as exited:
        command.execute(**{**options, "skip_checks": True})
    assert exited.value.code == 1
    assert json.loads(out.getvalue().strip().splitlines()[-1])["ok"] is False
    assert "chaos run failed: needs_human is 1, not 0" in err.getvalue()
