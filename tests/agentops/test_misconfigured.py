"""Refused by the provider is not refused by the business (issue 15).

A wrong or revoked key (401), a request that reached a server that is not the provider's
(421), a wrong address (404 from the endpoint itself) or a name that never resolves is our
side being misconfigured. Before, 13 of 30 renewals behind a misdirected address finished
"charge not done" with a payment-failed email, no money taken, and nobody told. Now the
step is ``not_done`` (nothing happened) and the task goes to a person with its own code;
resumed after the fix, it charges — once.

And a runner that cannot even be built (an unknown ``PLANNER``, a tool whose making fails on
a missing setting, a tool wrapper that does not import) is refused by ``manage.py check``,
and at run time hands its task to a person as a counted failed run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings

from agentops.effects import task_start
from agentops.effects._registry import registry
from agentops.operators.services import steps_reconcile_now, task_resume
from agentops.runner import task_run
from commerce.customers.selectors import PaymentState, payment_of
from journal.models import Entry, EntryKind, Step, Task
from journal.policy import Policy
from tests.agentops.test_business_effects import charges_of, renewal_refs, run
from tests.agentops.workers import quiet_world
from tests.journal.support import invoice
from tests.sandbox.fixtures import SandboxHandle, wait_for

pytestmark = pytest.mark.usefixtures("committed", "clean_faults")

POLICY = Policy(lookup_schedule=(0.0, 0.0), transient_retry_delays=(0.0, 0.0), max_steps=10)


@pytest.fixture
def world(committed: None, on_sandbox: dict[str, Any]) -> Iterator[dict[str, Any]]:
    redis = quiet_world()
    with override_settings(**on_sandbox, TOOL_TIMEOUT_SECONDS=1.0, PLANNER="scripted"):
        yield on_sandbox
    redis.flushdb()


Breakage = Callable[[dict[str, Any], SandboxHandle], AbstractContextManager[None]]


@contextmanager
def revoked_key(sandbox: dict[str, Any], payments: SandboxHandle) -> Iterator[None]:
    with override_settings(STRIPE_API_KEY="sk_live_revoked_long_ago"):
        yield


@contextmanager
def misdirected(sandbox: dict[str, Any], payments: SandboxHandle) -> Iterator[None]:
    payments.client.fault("payment_intents.create", "misdirected", times=None)
    yield
    payments.client.clear_faults()


@contextmanager
def wrong_path(sandbox: dict[str, Any], payments: SandboxHandle) -> Iterator[None]:
    with override_settings(STRIPE_API_BASE=sandbox["STRIPE_API_BASE"] + "/stripe"):
        yield


@contextmanager
def unresolvable(sandbox: dict[str, Any], payments: SandboxHandle) -> Iterator[None]:
    with override_settings(STRIPE_API_BASE="http://payments.agentops.invalid"):
        yield


BREAKAGES: dict[str, tuple[Breakage, str]] = {
    "401 revoked key": (revoked_key, "HTTP 401"),
    "421 misdirected": (misdirected, "HTTP 421 misdirected_request"),
    "404 wrong path": (wrong_path, "HTTP 404"),
    "name never resolves": (unresolvable, "never sent"),
}


@pytest.mark.parametrize("breakage", sorted(BREAKAGES))
def test_a_provider_refusing_us_hands_the_task_to_a_person_and_the_fix_charges_once(
    world: dict[str, Any],
    payments_sandbox: SandboxHandle,
    mail_sandbox: SandboxHandle,
    breakage: str,
) -> None:
    broken, said = BREAKAGES[breakage]
    inv = invoice()
    task = task_start(kind="renewal", goal="renew", refs=renewal_refs(inv))
    with broken(world, payments_sandbox):
        assert run(task, policy=POLICY).stopped == "needs_human"
    flagged = Task.objects.get(pk=task.pk)
    assert flagged.attention_code == "misconfigured"
    assert said in flagged.attention and "resume" in flagged.attention
    charges = list(Step.objects.filter(task=task, tool="charge_customer").order_by("n"))
    assert charges and all(c.state == "not_done" for c in charges)
    assert all(c.outcome.get("misconfigured") for c in charges)
    # Not the business's answer: no "payment failed" email, and the customer is told to wait.
    assert not Step.objects.filter(task=task, tool="send_email").exists()
    customer = payment_of(invoice=inv)
    assert customer is not None and customer.state == PaymentState.UNKNOWN
    assert charges_of(payments_sandbox, inv) == []

    # Fixed; a person resumes it, and the same charge is made, once.
    assert task_resume(task_id=task.pk, actor="ops", reason="key rotated") == "runnable"
    assert run(task, policy=POLICY).stopped == "finished"
    paid = Step.objects.filter(task=task, tool="charge_customer").latest("n")
    assert paid.state == "done" and paid.decision["harness"] == "after_fix"
    assert paid.args == charges[0].args
    assert [c["status"] for c in charges_of(payments_sandbox, inv)] == ["succeeded"]
    receipt = Step.objects.get(task=task, tool="send_email")
    assert receipt.args["purpose"] == "receipt" and receipt.state == "done"


def test_a_declined_card_still_finishes_as_the_business_said(
    world: dict[str, Any], payments_sandbox: SandboxHandle
) -> None:
    task = task_start(
        kind="renewal",
        goal="renew",
        refs=renewal_refs(invoice(), payment_method="pm_card_chargeDeclined"),
    )
    assert run(task, policy=POLICY).stopped == "finished"
    declined = Step.objects.get(task=task, tool="charge_customer")
    assert declined.state == "not_done" and not declined.outcome.get("misconfigured")
    notice = Step.objects.get(task=task, tool="send_email")
    assert notice.args["purpose"] == "payment_failed"


@override_settings(TOOL_TIMEOUT_SECONDS=1.0)  # what the lease check wants of the test settings
def test_an_unknown_planner_is_refused_at_start_up() -> None:
    with override_settings(PLANNER="nope"), pytest.raises(SystemCheckError, match="PLANNER='nope'"):
        call_command("check")
    call_command("check")  # and the configured one passes


def test_an_unbuildable_runner_hands_the_task_to_a_person_as_one_failed_run(
    world: dict[str, Any],
) -> None:
    task = task_start(kind="renewal", goal="renew", refs=renewal_refs(invoice()))
    with override_settings(PLANNER="nope"):
        assert task_run(task_id=task.pk).stopped == "needs_human"
    flagged = Task.objects.get(pk=task.pk)
    assert flagged.status == "needs_human" and flagged.attention_code == "misconfigured"
    assert "PLANNER 'nope'" in flagged.attention or "'nope'" in flagged.attention
    assert flagged.failed_runs == 1
    assert not Step.objects.filter(task=task).exists()
    # Fixed and resumed: it runs.
    task_resume(task_id=task.pk, actor="ops", reason="PLANNER fixed")
    assert task_run(task_id=task.pk).stopped == "finished"


def test_a_refusal_of_our_retry_is_not_taken_for_not_done_and_the_fix_charges_once(
    world: dict[str, Any], payments_sandbox: SandboxHandle
) -> None:
    """The charge lands but its reply is lost; then the key is revoked. The retry's 401 says
    nothing about the first attempt: the step stays unknown, and after the fix the lookup
    finds the first charge. Before, the step was settled not_done and the fix charged the
    invoice a second time."""
    inv = invoice()
    task = task_start(kind="renewal", goal="renew", refs=renewal_refs(inv))
    payments_sandbox.client.fault("payment_intents.create", "latency_after_effect", delay=1.5)
    later = Policy(lookup_schedule=(30.0, 0.0), transient_retry_delays=(0.0,), max_steps=10)
    assert run(task, policy=later).stopped == "waiting"
    wait_for(lambda: charges_of(payments_sandbox, inv), what="the slow charge to land")
    # Revoked, the key cannot even look it up, so the harness retries with the same key.
    steps_reconcile_now(step_ids=[Step.objects.get(task=task, n=1).pk], actor="test")
    with override_settings(STRIPE_API_KEY="sk_live_revoked_long_ago"):
        assert run(task, policy=POLICY).stopped == "needs_human"
    flagged = Task.objects.get(pk=task.pk)
    assert flagged.attention_code == "misconfigured"
    step = Step.objects.get(task=task, n=1)
    assert step.state == "unknown" and step.attempts == 2

    task_resume(task_id=task.pk, actor="ops", reason="key rotated back")
    assert run(task, policy=POLICY).stopped == "finished"
    assert Step.objects.get(pk=step.pk).state == "done"
    assert not Step.objects.filter(task=task, tool="charge_customer", n__gt=1).exists()
    assert [c["status"] for c in charges_of(payments_sandbox, inv)] == ["succeeded"]


@override_settings(TOOL_TIMEOUT_SECONDS=1.0)
@pytest.mark.parametrize("planner", ["anthropic", "openai"])
def test_a_model_planner_without_its_key_is_refused_at_start_up(
    planner: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(f"{planner.upper()}_API_KEY", raising=False)
    with (
        override_settings(PLANNER=planner, **{f"{planner.upper()}_API_KEY": ""}),
        pytest.raises(SystemCheckError, match=f"needs {planner.upper()}_API_KEY"),
    ):
        call_command("check")
    with override_settings(PLANNER=planner, **{f"{planner.upper()}_API_KEY": "k"}):
        call_command("check")


def _broken_charge() -> Any:
    raise ImproperlyConfigured("STRIPE_API_KEY is not set")


@contextmanager
def unbuildable_tool(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The charge tool's making fails, as one reading a missing setting would."""
    with monkeypatch.context() as patched:
        patched.setitem(registry.tools, "charge_customer", _broken_charge)
        yield "ImproperlyConfigured: STRIPE_API_KEY is not set"


@contextmanager
def unimportable_wrapper(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A tool wrapper (TOOL_WRAPPERS) named by a path that does not import."""
    with override_settings(TOOL_WRAPPERS=["agentops.no_such_module.wrap"]):
        yield "agentops.no_such_module"


@pytest.mark.parametrize("unbuilt", [unbuildable_tool, unimportable_wrapper])
def test_a_tool_that_cannot_be_built_hands_the_task_to_a_person_as_one_failed_run(
    world: dict[str, Any],
    payments_sandbox: SandboxHandle,
    mail_sandbox: SandboxHandle,
    monkeypatch: pytest.MonkeyPatch,
    unbuilt: Callable[[pytest.MonkeyPatch], AbstractContextManager[str]],
) -> None:
    inv = invoice()
    task = task_start(kind="renewal", goal="renew", refs=renewal_refs(inv))
    with unbuilt(monkeypatch) as said:
        assert task_run(task_id=task.pk).stopped == "needs_human"
        flagged = Task.objects.get(pk=task.pk)
        assert (flagged.status, flagged.attention_code) == ("needs_human", "misconfigured")
        assert said in flagged.attention and "could not be built" in flagged.attention
        assert flagged.failed_runs == 1
        # Rung again while still broken: no crash loop; it waits for its person, flagged once.
        assert task_run(task_id=task.pk).stopped == "needs_human"
        assert Task.objects.get(pk=task.pk).status == "needs_human"
        assert Entry.objects.filter(task=task, kind=EntryKind.TASK_FLAGGED).count() == 1
    assert not Step.objects.filter(task=task).exists()
    assert charges_of(payments_sandbox, inv) == []

    # Fixed; a person resumes it, and it charges once.
    assert task_resume(task_id=task.pk, actor="ops", reason="setting restored") == "runnable"
    assert run(task, policy=POLICY).stopped == "finished"
    assert [c["status"] for c in charges_of(payments_sandbox, inv)] == ["succeeded"]
