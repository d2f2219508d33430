"""Whatever the web role's moves are asked, in any order (docs/design.md §4): a hypothesis
machine drives random sequences of every journal function what faces the network may call —
people's and programs' decisions, with right and wrong arguments — over tasks in every state
a runner leaves them in, as the web role, on a plain connection. After every call:

- no step became done, none was settled or recorded (the web role records no effect);
- no object was freed: no step was marked undone and no once-only claim went;
- no task that ended runs again: it is how it ended, or with a person;
- no lease was taken.

A person's decision about a step (settled by hand, corrected) is recorded, for a worker to
apply: the machine sees it recorded, never applied. A failure prints the seed (and a
``@reproduce_failure`` blob) that replays it exactly. HYPOTHESIS_EXAMPLES runs more.
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from journal.leases import lease_acquire, lease_release
from journal.models import Approval, Step, Task
from journal.outcomes import Outcome
from journal.protocols import Finish
from journal.record import step_record, task_create, task_finish
from journal.settle import step_mark_unknown, step_settle
from journal.status import task_flag
from tests.databases import as_owner, role_params
from tests.journal.support import ChargeTool, Provider, charge, invoice

EXAMPLES = int(os.environ.get("HYPOTHESIS_EXAMPLES", "40"))

TOOLS = {"charge": ChargeTool(Provider(), compensation="refund", once_per_object=True)}


def _paid(kind: str = "renewal", plan: list[dict[str, Any]] | None = None) -> tuple[Task, Step]:
    """A task whose charge is done (and can be undone), its run given back."""
    task = task_create(kind=kind, goal="pay", refs={"invoice": invoice()}, plan=plan or [])
    lease = lease_acquire(task_id=task.pk, owner="setup")
    assert lease is not None
    step = step_record(lease=lease, decision=charge(task.refs["invoice"]), tools=TOOLS)
    step_settle(step_id=step.pk, outcome=Outcome.done({"id": "pi_x"}), via="attempt", lease=lease)
    lease_release(lease)
    return task, step


def _world() -> tuple[list[Task], list[Step]]:
    """Tasks in the states a runner leaves them in, with their steps."""
    tasks, steps = [], []
    # Finished, its charge done: the invoice is paid.
    finished, paid = _paid()
    lease = lease_acquire(task_id=finished.pk, owner="setup")
    assert lease is not None
    task_finish(lease=lease, decision=Finish("over"), summary="paid")
    # Finished, then handed to a person by a late report.
    flagged_over, flagged_paid = _paid()
    lease = lease_acquire(task_id=flagged_over.pk, owner="setup")
    assert lease is not None
    task_finish(lease=lease, decision=Finish("over"), summary="paid")
    as_owner(
        "SELECT journal_step_conflicted(p_step => %s, p_task => %s, p_reason => 'late', "
        "p_via => 'webhook')",
        [flagged_paid.pk, flagged_over.pk],
    )
    # With a person, its charge unknown (nobody can settle it automatically).
    open_task = task_create(kind="renewal", goal="pay", refs={"invoice": invoice()})
    lease = lease_acquire(task_id=open_task.pk, owner="setup")
    assert lease is not None
    unknown = step_record(lease=lease, decision=charge(open_task.refs["invoice"]), tools=TOOLS)
    step_mark_unknown(
        lease=lease,
        step=unknown,
        outcome=Outcome.unknown("timed out"),
        next_check_in=None,
        give_up=("rounds_exhausted", "still unknown"),  # type: ignore[arg-type]
    )
    lease_release(lease)
    # With a person, its charge done; and a saga under way, its charge done.
    person, person_paid = _paid()
    lease = lease_acquire(task_id=person.pk, owner="setup")
    assert lease is not None
    task_flag(lease=lease, code="parked", reason="look", release=True)  # type: ignore[arg-type]
    saga, saga_paid = _paid(kind="trip", plan=[{"tool": "charge"}])
    # Held for a person's approval.
    held = task_create(kind="trip", goal="trip", refs={"invoice": invoice()}, plan=[{"x": 1}])
    lease = lease_acquire(task_id=held.pk, owner="setup")
    assert lease is not None
    from journal.sagas import approval_request

    approval_request(
        lease=lease, tool="charge", args={"invoice": "I", "amount": 1}, reason="big", ttl=_hour()
    )
    tasks = [finished, flagged_over, open_task, person, saga, held]
    steps = [paid, flagged_paid, unknown, person_paid, saga_paid]
    return tasks, steps


def _hour() -> Any:
    from datetime import timedelta

    return timedelta(hours=1)


def _moves() -> st.SearchStrategy[tuple[str, str, tuple[str, ...]]]:
    """One of the web role's moves: its SQL, and which of its arguments the draw fills."""
    return st.sampled_from(
        [
            (
                "SELECT journal_task_resume(p_task => %s, p_actor => %s, p_reason => %s)",
                "task",
                ("actor", "reason"),
            ),
            (
                "SELECT journal_task_cancel(p_task => %s, p_actor => %s, p_reason => %s)",
                "task",
                ("actor", "reason"),
            ),
            (
                "SELECT journal_saga_compensate(p_task => %s, p_actor => %s, p_reason => %s)",
                "task",
                ("actor", "reason"),
            ),
            (
                "SELECT journal_approval_approve(p_task => %s, p_approval => %s, p_digest => %s, "
                "p_actor => %s)",
                "approval",
                ("digest", "actor"),
            ),
            (
                "SELECT journal_approval_reject(p_task => %s, p_approval => %s, p_actor => %s, "
                "p_reason => %s)",
                "approval",
                ("actor", "reason"),
            ),
            (
                "SELECT * FROM journal_steps_reconcile_now(p_steps => ARRAY[%s]::bigint[], "
                "p_actor => %s)",
                "step",
                ("actor",),
            ),
            (
                "SELECT journal_step_resolve(p_step => %s, p_actor => %s, p_done => %s, "
                "p_evidence => %s, p_reason => %s)",
                "step",
                ("actor", "done", "evidence", "reason"),
            ),
            (
                "SELECT journal_step_correct(p_step => %s, p_actor => %s, p_evidence => %s::jsonb, "
                "p_reason => %s)",
                "step",
                ("actor", "evidence_json", "reason"),
            ),
            (
                "SELECT journal_note(p_task => %s, p_actor => %s, p_action => %s)",
                "task",
                ("actor", "action"),
            ),
            (
                "SELECT journal_task_create(p_id => gen_random_uuid(), p_kind => %s, "
                "p_goal => 'g', p_refs => '{}', p_plan => '[]', p_entry => '{}')",
                "kind",
                (),
            ),
        ]
    )


class PeopleMachine(RuleBasedStateMachine):
    """The web role's moves, at random, over a world a runner made."""

    @initialize()
    def world(self) -> None:
        self.tasks, self.steps = _world()
        self.approvals = list(Approval.objects.filter(task__in=self.tasks).order_by("pk"))
        self.web = psycopg.connect(**role_params("web"), autocommit=True)
        self.before = self._facts()

    def teardown(self) -> None:
        web = getattr(self, "web", None)
        if web is not None:
            web.close()

    def _facts(self) -> dict[str, Any]:
        ids = [t.pk for t in self.tasks]
        return {
            "steps": sorted(
                Step.objects.filter(task_id__in=ids).values_list(
                    "id", "state", "offset_by_id", "settled_at"
                )
            ),
            "claims": as_owner(
                "SELECT guard_key, step_id FROM journal_object_once WHERE task_id = ANY(%s) "
                "ORDER BY 1",
                [ids],
            ),
            "tokens": dict(Task.objects.filter(pk__in=ids).values_list("pk", "lease_token")),
        }

    @rule(
        move=_moves(),
        pick=st.integers(min_value=0, max_value=63),
        actor=st.sampled_from(["", "ops", "someone@example.com"]),
        reason=st.sampled_from(["", "  ", "checked the provider", "x" * 3000]),
        done=st.booleans(),
        evidence=st.sampled_from(["", "ch_FORGED", "pi_1"]),
        evidence_json=st.sampled_from(["{}", '{"id": "pi_FORGED"}', '"x"', "[]"]),
        right_digest=st.booleans(),
        action=st.sampled_from(["resume", "cancel", "called the customer", "correct", ""]),
        kind=st.sampled_from(["renewal", "trip", ""]),
    )
    def web_move(
        self,
        move: tuple[str, str, tuple[str, ...]],
        pick: int,
        actor: str,
        reason: str,
        done: bool,
        evidence: str,
        evidence_json: str,
        right_digest: bool,
        action: str,
        kind: str,
    ) -> None:
        sql, target, fills = move
        params: list[Any] = []
        if target == "task":
            params.append(self.tasks[pick % len(self.tasks)].pk)
        elif target == "step":
            params.append(self.steps[pick % len(self.steps)].pk)
        elif target == "approval":
            approval = self.approvals[pick % len(self.approvals)]
            params += [approval.task_id, approval.pk]
        elif target == "kind":
            params.append(kind)
        drawn = {
            "actor": actor,
            "reason": reason,
            "done": done,
            "evidence": evidence,
            "evidence_json": evidence_json,
            "action": action,
            "digest": (
                self.approvals[pick % len(self.approvals)].digest if right_digest else "0" * 64
            )
            if self.approvals
            else "",
        }
        params += [drawn[name] for name in fills]
        # Refused or not, the invariants say nothing was written that should not be.
        with contextlib.suppress(psycopg.Error):
            self.web.execute(sql, params)

    @invariant()
    def no_effect_and_no_object_freed(self) -> None:
        if not hasattr(self, "before"):
            return
        now = self._facts()
        assert now["steps"] == self.before["steps"], "a step was recorded, settled or undone"
        assert now["claims"] == self.before["claims"], "a once-only claim changed"
        assert now["tokens"] == self.before["tokens"], "a lease was taken"

    @invariant()
    def an_ended_task_never_runs_again(self) -> None:
        if not hasattr(self, "tasks"):
            return
        for status, ended in Task.objects.filter(pk__in=[t.pk for t in self.tasks]).values_list(
            "status", "ended_as"
        ):
            if ended:
                assert status in (ended, "needs_human"), (status, ended)


PeopleMachine.TestCase.settings = settings(
    max_examples=EXAMPLES,
    stateful_step_count=20,
    deadline=None,
    print_blob=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

TestPeopleMoves = pytest.mark.timeout(300 * max(1, EXAMPLES // 40))(
    pytest.mark.usefixtures("committed")(PeopleMachine.TestCase)
)


@pytest.mark.usefixtures("committed")
def test_a_decision_the_machine_records_is_applied_only_by_a_worker() -> None:
    """What the machine sees recorded (a person's decision about a step) becomes a settlement
    only when a worker applies it, asking again whether it still may."""
    from journal.operator import decision_apply

    task = task_create(kind="renewal", goal="pay", refs={"invoice": invoice()})
    lease = lease_acquire(task_id=task.pk, owner="setup")
    assert lease is not None
    step = step_record(lease=lease, decision=charge(task.refs["invoice"]), tools=TOOLS)
    lease_release(lease)
    as_owner(
        "SELECT journal_step_conflicted(p_step => %s, p_task => %s, p_reason => 'check', "
        "p_via => 'test')",
        [step.pk, task.pk],
    )
    with psycopg.connect(**role_params("web"), autocommit=True) as web:
        row = web.execute(
            "SELECT journal_step_resolve(p_step => %s, p_actor => 'ops', p_done => true, "
            "p_evidence => 'ch_1', p_reason => 'seen')",
            [step.pk],
        ).fetchone()
        assert row is not None
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            web.execute("SELECT journal_decision_apply(p_decision => %s)", [row[0]])
    assert Step.objects.get(pk=step.pk).state == "pending"
    assert decision_apply(decision_id=int(str(row[0]))) == "settled done by hand"
    assert Step.objects.get(pk=step.pk).state == "done"
    assert json.loads(json.dumps(Step.objects.get(pk=step.pk).evidence))["reference"] == "ch_1"
