"""The runner's next move, by table (journal/moves.py): one row per branch, and the
precedence between them.

Pure: no database (these tests do not ask for one, and pytest-django refuses any query),
no planner. Each row also says what the decision asked (``Ask``): the runner reads only
what the decision turns on, so a plain step costs nothing more (tests/journal/test_cost.py).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from journal.models import Approval, ApprovalState, Attention, Step, TaskStatus
from journal.moves import (
    AskPlanner,
    AwaitApproval,
    Compensate,
    Compensated,
    Finish,
    HandOver,
    Hold,
    Move,
    OpenApproval,
    OpenStep,
    Reconcile,
    Record,
    Retry,
    Stop,
    TaskRow,
    Unwind,
    Wait,
    WakeUp,
    next_move,
    on_decision,
)
from journal.outcomes import StepState
from journal.policy import Policy
from journal.protocols import Call, Refusal, StepFact, TaskFacts
from journal.protocols import Finish as Over

NOW = datetime(2027, 1, 1, 12, 0, tzinfo=UTC)
POLICY = Policy(lookup_schedule=(1.0, 5.0, 60.0), transient_retry_delays=(1.0, 5.0), max_steps=10)
TOOLS = frozenset({"charge", "hold_seat", "release_seat"})
CHARGE = {"amount": 100, "invoice": "INV-1"}
DONE, NOT_DONE, UNKNOWN, PENDING = (
    StepState.DONE,
    StepState.NOT_DONE,
    StepState.UNKNOWN,
    StepState.PENDING,
)


def ago(seconds: float) -> datetime:
    return NOW - timedelta(seconds=seconds)


def later(seconds: float) -> datetime:
    return NOW + timedelta(seconds=seconds)


def fact(n: int, state: StepState = DONE, **kw: Any) -> StepFact:
    kw.setdefault("tool", "charge")
    kw.setdefault("args", CHARGE)
    kw.setdefault("detail", "")
    kw.setdefault("settled_at", None if state in (UNKNOWN, PENDING) else ago(60))
    return StepFact(n=n, state=state, key=f"ao:t:{n}", **kw)


def unsent(n: int, settled: float, **kw: Any) -> StepFact:
    """A call that could not be sent (connection refused): worth a retry."""
    return fact(
        n, NOT_DONE, transient=True, detail="could not connect", settled_at=ago(settled), **kw
    )


# A saga's first effect, and its undo.
HOLD = fact(1, tool="hold_seat", args={"seat": "12A"}, undo_tool="release_seat")


def undo(**kw: Any) -> StepFact:
    return fact(2, tool="release_seat", args={"hold": "h_1"}, offsets=1, **kw)


REFUSED_US = "the provider refused our key"
# Open steps and approvals as the runner reads them (never saved: no database here).
UNKNOWN_ROW = Step(key="ao:t:1", tool="charge", state=UNKNOWN, next_check_at=later(10))
PENDING_ROW = Step(key="ao:t:1", tool="charge", state=PENDING, next_check_at=later(10))
ASKED = Approval(pk=7, tool="charge", args=CHARGE, reason="above 3,000.00")
APPROVED = Approval(pk=8, tool="charge", args=CHARGE, reason="above", state=ApprovalState.APPROVED)


@dataclass
class Given:
    """The answers to what the decision may ask, and the questions it asked, in order."""

    open: OpenStep | None = None
    held: OpenApproval | None = None
    holder_next: datetime | bool | None = None
    resumed: bool = False
    hold_why: str | None = None
    verify: bool = False
    asked: list[str] = field(default_factory=list)

    def open_step(self) -> OpenStep | None:
        self.asked.append("open_step")
        return self.open

    def approval(self) -> OpenApproval | None:
        self.asked.append("approval")
        return self.held

    def holder(self, blocked: StepFact) -> datetime | bool | None:
        self.asked.append("holder")
        return self.holder_next

    def resumed_since(self, step: StepFact) -> bool:
        self.asked.append("resumed_since")
        return self.resumed

    def hold(self, call: Call) -> str | None:
        self.asked.append("hold")
        return self.hold_why

    def verify_before(self, tool: str) -> bool:
        self.asked.append("verify_before")
        return self.verify


@dataclass(frozen=True)
class Case:
    expected: Move
    steps: Sequence[StepFact] = ()
    status: str = TaskStatus.RUNNABLE
    wake_at: datetime | None = None
    unwinding: bool = False
    step_count: int | None = None  # the steps' count unless given
    saga: bool = False
    tools: Collection[str] = TOOLS
    given: Given = field(default_factory=Given)
    asked: Sequence[str] = ()


def row(name: str, expected: Move, **kw: Any) -> Any:
    given = {k: kw.pop(k) for k in list(kw) if k in Given.__dataclass_fields__ and k != "asked"}
    return pytest.param(Case(expected, given=Given(**given), **kw), id=name)


def retry(of: StepFact, why: str, *, verify_first: bool = False) -> Retry:
    call = Call(of.tool, of.args, raw={"harness": why, "of": of.n})
    return Retry(call, of.retries + 1, verify_first=verify_first)


def misconfigured(n: int) -> HandOver:
    return HandOver(
        Attention.MISCONFIGURED,
        f"step ao:t:{n} (charge): {REFUSED_US}. Nothing happened. Fix the configuration, then "
        "resume the task: the step is tried again",
    )


BLOCKED = fact(
    2,
    NOT_DONE,
    refusal=Refusal.IN_FLIGHT,
    refused_by="ao:other:1",
    detail="another charge for INV-1 is in flight",
    settled_at=ago(3),
)
TO_SETTLE = "step ao:other:1, another effect on the same object, to settle"
UNDO_FAILED = (
    "the undo of step ao:t:1 (hold_seat) by release_seat did not happen: {}; the effect "
    "still stands"
)
APPROVED_CALL = Call("charge", CHARGE, raw={"harness": "approved", "approval": 8})
OPEN = [fact(1, UNKNOWN)]

CASES = [
    # --- A task that is not runnable stops, or wakes up; nothing is read ------------------
    row("finished", Stop("finished"), status=TaskStatus.FINISHED, steps=[fact(1)]),
    row("compensated", Stop("compensated"), status=TaskStatus.COMPENSATED),
    row("cancelled", Stop("cancelled"), status=TaskStatus.CANCELLED),
    row("with a person", Stop("needs_human"), status=TaskStatus.NEEDS_HUMAN, steps=OPEN),
    row("held", Stop("awaiting_approval"), status=TaskStatus.AWAITING_APPROVAL, steps=OPEN),
    row(
        "waiting, not yet", Stop("waiting"), status=TaskStatus.WAITING, wake_at=later(1), steps=OPEN
    ),
    row("waiting, time came", WakeUp(), status=TaskStatus.WAITING, wake_at=NOW, steps=OPEN),
    row("waiting, no time", WakeUp(), status=TaskStatus.WAITING, wake_at=None),
    # --- An open step comes before anything else a runnable task does ---------------------
    row(
        "unknown, not due: wait for its lookup",
        Wait(later(10), "step ao:t:1"),
        steps=OPEN,
        open=OpenStep(UNKNOWN_ROW, due=False),
        asked=["open_step"],
    ),
    row(
        "unknown, due: reconcile",
        Reconcile(UNKNOWN_ROW),
        steps=OPEN,
        open=OpenStep(UNKNOWN_ROW, due=True),
        asked=["open_step"],
    ),
    row(
        "pending (abandoned): reconcile at once",
        Reconcile(PENDING_ROW),
        steps=[fact(1, PENDING)],
        open=OpenStep(PENDING_ROW, due=False),
        asked=["open_step"],
    ),
    row(
        "open step beats unwinding and the step limit",
        Reconcile(UNKNOWN_ROW),
        steps=OPEN,
        unwinding=True,
        step_count=10,
        saga=True,
        open=OpenStep(UNKNOWN_ROW, due=True),
        asked=["open_step"],
    ),
    row(
        "open in the facts, settled by the time it is read: go on",
        AskPlanner(),
        steps=OPEN,
        open=None,
        asked=["open_step"],
    ),
    # --- Unwinding: the harness compensates, newest first ---------------------------------
    row("unwinding: undo a done effect", Compensate(HOLD, 0), steps=[HOLD], unwinding=True),
    row("unwinding: nothing left", Compensated(), steps=[HOLD, undo()], unwinding=True),
    row(
        "unwinding beats the step limit",
        Compensated(),
        steps=[fact(1, NOT_DONE)],
        unwinding=True,
        step_count=10,
    ),
    row(
        "unwinding: an unsent undo waits for its backoff",
        Wait(later(0.5), "a retry of the undo of step ao:t:1"),
        steps=[HOLD, undo(state=NOT_DONE, transient=True, settled_at=ago(0.5))],
        unwinding=True,
    ),
    row(
        "unwinding: an unsent undo, backoff over: again, a new key",
        Compensate(HOLD, 1),
        steps=[HOLD, undo(state=NOT_DONE, transient=True, settled_at=ago(2))],
        unwinding=True,
    ),
    row(
        "unwinding: an unsent undo, retries used up",
        HandOver(Attention.COMPENSATION_FAILED, UNDO_FAILED.format("could not connect")),
        steps=[
            HOLD,
            undo(state=NOT_DONE, transient=True, retries=2, detail="could not connect"),
        ],
        unwinding=True,
    ),
    row(
        "unwinding: the undo refused by the provider",
        HandOver(Attention.COMPENSATION_FAILED, UNDO_FAILED.format("no such hold")),
        steps=[HOLD, undo(state=NOT_DONE, detail="no such hold")],
        unwinding=True,
    ),
    row(
        "unwinding: the undo refused us, not resumed",
        HandOver(
            Attention.MISCONFIGURED,
            UNDO_FAILED.format(REFUSED_US) + ". The provider refused us, not the undo: fix the "
            "configuration, then resume the task: the undo is made again",
        ),
        steps=[HOLD, undo(state=NOT_DONE, misconfigured=True, detail=REFUSED_US)],
        unwinding=True,
        asked=["resumed_since"],
    ),
    row(
        "unwinding: the undo refused us, resumed since: again, a new key",
        Compensate(HOLD, 1),
        steps=[HOLD, undo(state=NOT_DONE, misconfigured=True, detail=REFUSED_US)],
        unwinding=True,
        resumed=True,
        asked=["resumed_since"],
    ),
    row(
        "unwinding: the undo's tool is missing",
        HandOver(
            Attention.TOOL_MISSING,
            "step ao:t:1 must be undone by release_seat, which this task cannot use",
        ),
        steps=[HOLD],
        unwinding=True,
        tools={"hold_seat", "charge"},
    ),
    # --- The step limit, before anything is decided again ---------------------------------
    row(
        "step limit beats a misconfigured last step",
        HandOver(Attention.STEP_LIMIT, "the task reached its limit of 10 steps without finishing"),
        steps=[fact(1, NOT_DONE, misconfigured=True, detail=REFUSED_US)],
        step_count=10,
    ),
    # --- The provider refused us: a person, then the same call again ----------------------
    row(
        "refused us: a person fixes it",
        misconfigured(1),
        steps=[fact(1, NOT_DONE, misconfigured=True, detail=REFUSED_US)],
        asked=["resumed_since"],
    ),
    row(
        "refused us, resumed since: the same call, a new step",
        retry(fact(1), "after_fix"),
        steps=[fact(1, NOT_DONE, misconfigured=True, detail=REFUSED_US)],
        resumed=True,
        asked=["resumed_since", "verify_before"],
    ),
    row(
        "refused us in a saga: a person, not unwinding",
        misconfigured(1),
        steps=[fact(1, NOT_DONE, misconfigured=True, detail=REFUSED_US)],
        saga=True,
        asked=["resumed_since"],
    ),
    row(
        "a name that did not resolve: retried first, like any unsent call",
        Wait(later(0.5), "a retry of step ao:t:1"),
        steps=[unsent(1, 0.5, misconfigured=True)],
    ),
    row(
        "a name that still does not resolve after the retries: refused us, beats the planner",
        HandOver(
            Attention.MISCONFIGURED,
            "step ao:t:3 (charge): could not connect. Nothing happened. Fix the configuration, "
            "then resume the task: the step is tried again",
        ),
        steps=[unsent(n, 20 - n, misconfigured=True) for n in (1, 2, 3)],
        asked=["resumed_since"],
    ),
    # --- Blocked by another task's live effect on the same object -------------------------
    row(
        "blocked, the holder looks up later: wait for it",
        Wait(later(30), TO_SETTLE),
        steps=[fact(1), BLOCKED],
        holder_next=later(30),
        asked=["holder"],
    ),
    row(
        "blocked, the holder in flight: back off as long as waited",
        Wait(later(3), TO_SETTLE),
        steps=[fact(1), BLOCKED],
        holder_next=True,
        asked=["holder"],
    ),
    row(
        "blocked in a saga: wait, not unwind",
        Wait(later(3), TO_SETTLE),
        steps=[fact(1), BLOCKED],
        saga=True,
        holder_next=True,
        asked=["holder"],
    ),
    row(
        "blocked, the holder settled: the same call again",
        retry(BLOCKED, "after_in_flight"),
        steps=[fact(1), BLOCKED],
        holder_next=None,
        asked=["holder", "verify_before"],
    ),
    # --- A passing failure is retried by the harness, before the planner ------------------
    row(
        "unsent, backoff not over: wait",
        Wait(later(0.5), "a retry of step ao:t:1"),
        steps=[unsent(1, 0.5)],
    ),
    row(
        "unsent, backoff over: the same call, a new step",
        retry(unsent(1, 2), "retry"),
        steps=[unsent(1, 2)],
        asked=["verify_before"],
    ),
    row(
        "unsent, the saga verifies what it holds first",
        retry(unsent(1, 2), "retry", verify_first=True),
        steps=[unsent(1, 2)],
        verify=True,
        asked=["verify_before"],
    ),
    row(
        "unsent twice: the second delay",
        Wait(later(4), "a retry of step ao:t:2"),
        steps=[unsent(1, 10), unsent(2, 1, retries=1)],
    ),
    row(
        "another call's failure does not count against the streak",
        Wait(later(0.5), "a retry of step ao:t:2"),
        steps=[unsent(1, 10), unsent(2, 0.5, args={"amount": 200, "invoice": "INV-1"})],
    ),
    row(
        "a transient retry beats a saga's unwinding",
        Wait(later(0.5), "a retry of step ao:t:1"),
        steps=[unsent(1, 0.5)],
        saga=True,
    ),
    row(
        "unsent, retries used up: the planner decides",
        AskPlanner(),
        steps=[unsent(n, 20 - n) for n in (1, 2, 3)],
    ),
    row(
        "unsent, retries used up, in a saga: it unwinds",
        Unwind("step ao:t:3 (charge) did not happen: could not connect"),
        steps=[unsent(n, 20 - n) for n in (1, 2, 3)],
        saga=True,
    ),
    # --- A saga goes forward only while every step can still happen -----------------------
    row(
        "saga, a step did not happen: unwind",
        Unwind("step ao:t:2 (charge) did not happen: card declined"),
        steps=[HOLD, fact(2, NOT_DONE, detail="card declined")],
        saga=True,
    ),
    row(
        "saga, over a limit: unwind",
        Unwind("step ao:t:2 (charge) did not happen: over the cap"),
        steps=[HOLD, fact(2, NOT_DONE, refusal=Refusal.LIMIT, detail="over the cap")],
        saga=True,
    ),
    row(
        "saga, already done elsewhere: unwind",
        Unwind("step ao:t:2 (charge) did not happen: already done"),
        steps=[HOLD, fact(2, NOT_DONE, refusal=Refusal.ALREADY_DONE, detail="already done")],
        saga=True,
    ),
    row(
        "saga, its own effect asked for again (refused already done by itself): ask again",
        AskPlanner(),
        steps=[
            HOLD,
            fact(2),
            fact(3, NOT_DONE, refusal=Refusal.ALREADY_DONE, refused_by="ao:t:2", detail="done"),
        ],
        saga=True,
        asked=["approval"],
    ),
    row(
        "saga, its own charge asked for again and refused over the cap: ask again",
        AskPlanner(),
        steps=[HOLD, fact(2), fact(3, NOT_DONE, refusal=Refusal.LIMIT, detail="over the cap")],
        saga=True,
        asked=["approval"],
    ),
    row(
        "saga, a refusal the planner can put right: ask it",
        AskPlanner(),
        steps=[HOLD, fact(2, NOT_DONE, refusal=Refusal.NOT_THIS_TASKS, detail="not INV-2")],
        saga=True,
        asked=["approval"],
    ),
    row(
        "not a saga, a step did not happen: the planner decides, no approval read",
        AskPlanner(),
        steps=[fact(1, NOT_DONE, detail="card declined")],
    ),
    row(
        "saga, held: wait for the person again",
        AwaitApproval(ASKED),
        steps=[HOLD],
        saga=True,
        held=OpenApproval(ASKED, expired=False),
        asked=["approval"],
    ),
    row(
        "saga, held past its expiry: still the person's",
        AwaitApproval(ASKED),
        steps=[HOLD],
        saga=True,
        held=OpenApproval(ASKED, expired=True),
        asked=["approval"],
    ),
    row(
        "saga, approved but expired: expire, then ask the planner",
        AskPlanner(expire=APPROVED),
        steps=[HOLD],
        saga=True,
        held=OpenApproval(APPROVED, expired=True),
        asked=["approval"],
    ),
    row(
        "saga, approved: exactly what was approved",
        Record(APPROVED_CALL, APPROVED),
        steps=[HOLD],
        saga=True,
        held=OpenApproval(APPROVED, expired=False),
        asked=["approval", "verify_before"],
    ),
    row(
        "saga, approved, charged for what it holds: verified first",
        Record(APPROVED_CALL, APPROVED, verify_first=True),
        steps=[HOLD],
        saga=True,
        held=OpenApproval(APPROVED, expired=False),
        verify=True,
        asked=["approval", "verify_before"],
    ),
    # --- Otherwise the planner decides ----------------------------------------------------
    row("a new task: ask the planner", AskPlanner()),
    row("a new saga: no approval open, ask", AskPlanner(), saga=True, asked=["approval"]),
    row("after a done step: ask the planner", AskPlanner(), steps=[fact(1)]),
]


@pytest.mark.parametrize("case", CASES)
def test_next_move(case: Case) -> None:
    task = TaskRow(
        status=case.status,
        wake_at=case.wake_at,
        unwinding=case.unwinding,
        step_count=len(case.steps) if case.step_count is None else case.step_count,
    )
    facts = TaskFacts(task_id="t", kind="k", goal="g", refs={}, steps=list(case.steps))
    move = next_move(
        task=task,
        facts=facts,
        now=NOW,
        policy=POLICY,
        saga=case.saga,
        tools=case.tools,
        ask=case.given,
    )
    assert move == case.expected
    assert case.given.asked == list(case.asked)


CALL = Call("charge", CHARGE, raw={"model": "said so"})


@pytest.mark.parametrize(
    ("decision", "given", "expected", "asked"),
    [
        pytest.param(Over("paid"), Given(hold_why="no"), Finish(Over("paid")), [], id="finish"),
        pytest.param(
            CALL, Given(hold_why="over 3,000.00"), Hold(CALL, "over 3,000.00"), ["hold"], id="held"
        ),
        pytest.param(
            CALL,
            Given(hold_why="over", verify=True),
            Hold(CALL, "over"),
            ["hold"],
            id="held before anything is verified",
        ),
        pytest.param(CALL, Given(), Record(CALL), ["hold", "verify_before"], id="record"),
        pytest.param(
            CALL, Given(hold_why=""), Record(CALL), ["hold", "verify_before"], id="no reason"
        ),
        pytest.param(
            CALL,
            Given(verify=True),
            Record(CALL, verify_first=True),
            ["hold", "verify_before"],
            id="record, verified first",
        ),
    ],
)
def test_on_the_planners_decision(
    decision: Call | Over, given: Given, expected: Move, asked: list[str]
) -> None:
    assert on_decision(decision, ask=given) == expected
    assert given.asked == asked
