"""A rolling deploy of the workers while renewals run (issue 36; docs/operating/deploys.md).

Version 1.0's worker runs a batch of renewals whose charges are slow; version 2.0's worker is
started beside it, then 1.0's is stopped the way a deploy stops it (SIGTERM: RQ's warm
shutdown finishes the job in hand, then exits). Every renewal finishes, with one charge and
one receipt per invoice in the providers' ledgers, and the journal says which version
recorded each step: both did.
"""

from __future__ import annotations

import signal

import pytest

from journal.models import Entry, EntryKind, Step, Task
from tests.agentops.test_business_effects import charges_of
from tests.agentops.test_runner import effects, renewal
from tests.agentops.workers import Fleet
from tests.sandbox.fixtures import SandboxHandle, wait_for

pytestmark = pytest.mark.usefixtures("committed")

RENEWALS = 12


def recorded_by(version: str, tasks: list[Task]) -> int:
    """Steps of ``tasks`` recorded by a runner of ``version``."""
    return sum(
        1
        for by in Entry.objects.filter(task__in=tasks, kind=EntryKind.STEP_RECORDED).values_list(
            "data__by", flat=True
        )
        if str(by).endswith(f" agentops {version}")
    )


def test_workers_replaced_mid_run_by_the_next_version_finish_every_renewal_once(
    fleet: Fleet, payments_sandbox: SandboxHandle, mail_sandbox: SandboxHandle
) -> None:
    # Each charge takes a while, so that the deploy finds renewals in the middle of theirs.
    payments_sandbox.client.fault(
        "payment_intents.create", "latency_before_effect", delay=0.15, times=None
    )
    old = fleet.worker(AGENTOPS_VERSION="1.0")
    tasks = [renewal() for _ in range(RENEWALS)]
    wait_for(
        lambda: recorded_by("1.0", tasks) >= 3,
        timeout=60,
        interval=0.05,
        what="version 1.0 to record some steps",
    )
    new = fleet.worker(AGENTOPS_VERSION="2.0")
    old.send_signal(signal.SIGTERM)  # the deploy: the job in hand is finished, then it exits
    old.wait(timeout=60)
    wait_for(
        lambda: (
            Task.objects.filter(pk__in=[t.pk for t in tasks], status="finished").count() == RENEWALS
        ),
        timeout=120,
        interval=0.1,
        what="every renewal to finish on version 2.0",
    )
    assert new.poll() is None
    assert Task.objects.filter(pk__in=[t.pk for t in tasks]).exclude(attention_code="").count() == 0
    for task in tasks:
        assert effects(task, payments_sandbox, mail_sandbox) == {
            "charge_customer": 1,
            "send_email": 1,
        }
        invoice = task.refs["invoice"]
        assert [c["status"] for c in charges_of(payments_sandbox, invoice)] == ["succeeded"]
        assert Step.objects.filter(task=task, kind="call").count() == 2
    old_steps, new_steps = recorded_by("1.0", tasks), recorded_by("2.0", tasks)
    assert old_steps >= 3 and new_steps >= 1
    assert old_steps + new_steps == 2 * RENEWALS
