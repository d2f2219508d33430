"""Deploys while tasks run (issue 36): a step recorded by one version and resumed by the next.

The journal freezes a step's tool, arguments and key, so the next version either carries it on
as it was, or hands it to a person with a sentence naming both runners and their versions;
never a crash loop, never the arguments rewritten, never a new key, never a second effect.
Each process says which version it runs: on the lease of every task it runs, and in
``/metrics``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import override_settings

from agentops import version
from agentops.effects import task_start
from agentops.effects._registry import registry
from agentops.operators.services import steps_reconcile_now, task_resume
from agentops.runner import task_run
from agentops.telemetry import instruments
from commerce.tools.payments import ChargeCustomer
from journal.models import Entry, EntryKind, Step, Task
from tests.agentops.test_business_effects import charges_of, renewal_refs
from tests.agentops.test_metrics import scrape
from tests.agentops.workers import quiet_world
from tests.journal.support import invoice
from tests.sandbox.fixtures import SandboxHandle, wait_for

pytestmark = pytest.mark.usefixtures("committed", "clean_faults")

# Lookups late enough that only a person's "reconcile now" makes one due.
LATER = {"RECONCILE_SCHEDULE": [3600.0, 0.0], "TRANSIENT_RETRY_SCHEDULE": [0.0]}


@pytest.fixture
def world(committed: None, on_sandbox: dict[str, Any]) -> Iterator[dict[str, Any]]:
    redis = quiet_world()
    with override_settings(**on_sandbox, **LATER, TOOL_TIMEOUT_SECONDS=1.0, PLANNER="scripted"):
        yield on_sandbox
    redis.flushdb()


def running(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """This process runs version ``name`` from now on (a deploy, as its runners see it)."""
    monkeypatch.setattr(version, "running_version", lambda: name)


class ChargeWithALowerLimit(ChargeCustomer):
    """The charge tool of a later version whose schema takes less than the earlier one's."""

    schema = {
        **ChargeCustomer.schema,
        "properties": {
            **ChargeCustomer.schema["properties"],
            "amount": {"type": "integer", "minimum": 1, "maximum": 1000},
        },
    }


def unknown_charge(payments: SandboxHandle, monkeypatch: pytest.MonkeyPatch, fault: str) -> Task:
    """A renewal whose charge version 1.0 recorded and left unknown (``fault`` on every
    attempt), waiting for a lookup an hour away."""
    inv = invoice()
    task = task_start(kind="renewal", goal="renew", refs=renewal_refs(inv))
    running(monkeypatch, "1.0")
    payments.client.fault("payment_intents.create", fault, delay=1.5, times=None)
    assert task_run(task_id=task.pk).stopped == "waiting"
    step = Step.objects.get(task=task, n=1)
    assert (step.tool, step.state) == ("charge_customer", "unknown")
    recorded = Entry.objects.get(step=step, kind=EntryKind.STEP_RECORDED)
    assert recorded.data["by"].endswith(" agentops 1.0")
    payments.client.clear_faults()
    steps_reconcile_now(step_ids=[step.pk], actor="ops")  # due now
    return task


def test_a_step_whose_tool_the_next_version_lacks_goes_to_a_person_naming_both_versions(
    world: dict[str, Any], payments_sandbox: SandboxHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    task = unknown_charge(payments_sandbox, monkeypatch, "latency_after_effect")
    inv = task.refs["invoice"]
    wait_for(lambda: charges_of(payments_sandbox, inv), what="the slow charge to land")

    with monkeypatch.context() as deployed:
        deployed.delitem(registry.tools, "charge_customer")  # renamed in 2.0
        running(deployed, "2.0")
        assert task_run(task_id=task.pk).stopped == "needs_human"
        # Asked again (the sweeper rings), it stays with the person: no loop, no call.
        assert task_run(task_id=task.pk).stopped == "needs_human"
    flagged = Task.objects.get(pk=task.pk)
    assert flagged.attention_code == "tool_missing"
    assert "'charge_customer' is not available" in flagged.attention
    assert "agentops 1.0, run now by" in flagged.attention
    assert flagged.attention.endswith("settle the step by hand")
    assert "agentops 2.0" in flagged.attention
    assert len(charges_of(payments_sandbox, inv)) == 1

    # Version 2.1 has the tool again: resumed, the lookup finds the first charge.
    running(monkeypatch, "2.1")
    task_resume(task_id=task.pk, actor="ops", reason="charge_customer is back in 2.1")
    assert task_run(task_id=task.pk).stopped == "finished"
    step = Step.objects.get(task=task, n=1)
    assert step.state == "done"
    assert not Step.objects.filter(task=task, tool="charge_customer", n__gt=1).exists()
    assert [c["status"] for c in charges_of(payments_sandbox, inv)] == ["succeeded"]


def test_frozen_arguments_the_next_versions_schema_refuses_are_never_sent_again_or_rewritten(
    world: dict[str, Any], payments_sandbox: SandboxHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The charge never reached the provider; its key is still trusted, so the harness would
    send the same call again under the same key, but version 2.0's tool refuses 4900."""
    task = unknown_charge(payments_sandbox, monkeypatch, "error_500_before")
    inv = task.refs["invoice"]
    assert charges_of(payments_sandbox, inv) == []

    with monkeypatch.context() as deployed:
        deployed.setitem(registry.tools, "charge_customer", ChargeWithALowerLimit)
        running(deployed, "2.0")
        assert task_run(task_id=task.pk).stopped == "needs_human"
    flagged = Task.objects.get(pk=task.pk)
    assert flagged.attention_code == "tool_missing"
    reason = flagged.attention
    assert "would be sent again with its frozen arguments, which charge_customer refuses" in reason
    assert "amount" in reason and "agentops 1.0" in reason and "agentops 2.0" in reason
    step = Step.objects.get(task=task, n=1)
    assert step.state == "unknown" and step.args["amount"] == 4900
    assert charges_of(payments_sandbox, inv) == []

    # Back on a version whose tool takes them: the same call, the same key, once.
    running(monkeypatch, "2.1")
    task_resume(task_id=task.pk, actor="ops", reason="the limit is back in 2.1")
    assert task_run(task_id=task.pk).stopped == "finished"
    charges = charges_of(payments_sandbox, inv)
    assert [(c["status"], c["key"]) for c in charges] == [("succeeded", step.key)]
    assert Step.objects.get(pk=step.pk).state == "done"


def test_each_process_says_which_version_it_runs_on_the_lease_and_in_the_metrics(
    world: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    running(monkeypatch, "3.1+gabc")
    assert version.runner_name("host-a", 42) == "host-a:42 agentops 3.1+gabc"
    instruments.heartbeat(instruments.WORKER)
    samples = scrape()
    seen = {
        labels: value
        for (name, labels), value in samples.items()
        if name == "agentops_version_seen_timestamp_seconds"
    }
    assert (("process", "worker"), ("version", "3.1+gabc")) in seen
    # The scrape's own web process said so too.
    assert (("process", "web"), ("version", "3.1+gabc")) in seen


def test_the_version_is_the_deployments_name_or_the_packages_with_its_commit(
    tmp_path: Path,
) -> None:
    assert version.version_from("v2.4.1 (image sha256:ab\ncd)", tmp_path) == (
        "v2.4.1__image_sha256:ab_cd_"
    )
    bare = version.version_from("", tmp_path)  # not a checkout: the package's version
    assert bare and "+g" not in bare
    git = tmp_path / "repo" / ".git"
    (git / "refs" / "heads").mkdir(parents=True)
    (git / "HEAD").write_text("ref: refs/heads/main\n")
    packed = "1a2b3c4d5e6f7a8b" * 2 + " refs/heads/main\n"
    (git / "packed-refs").write_text("# pack-refs\n" + packed)
    assert version.version_from("", tmp_path / "repo") == f"{bare}+g1a2b3c4d5e6f"
    (git / "refs" / "heads" / "main").write_text("f" * 40 + "\n")  # loose beats packed
    assert version.version_from("", tmp_path / "repo") == f"{bare}+gffffffffffff"
    # A worktree's .git is a file naming its own directory, whose refs are the common ones.
    worktree_git = git / "worktrees" / "wt"
    worktree_git.mkdir(parents=True)
    (worktree_git / "HEAD").write_text("ref: refs/heads/main\n")
    (worktree_git / "commondir").write_text("../..\n")
    (tmp_path / "wt").mkdir()
    (tmp_path / "wt" / ".git").write_text(f"gitdir: {worktree_git}\n")
    assert version.version_from("", tmp_path / "wt") == f"{bare}+gffffffffffff"
    (worktree_git / "HEAD").write_text("0" * 40 + "\n")  # detached
    assert version.version_from("", tmp_path / "wt") == f"{bare}+g000000000000"
