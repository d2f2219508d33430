"""Writing decisions down before anything acts on them (docs/design.md §4, §6)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, cast
from uuid import UUID

from django.db import IntegrityError, connection, transaction

from journal.calls import NotUsable, Row, call
from journal.events import step_event
from journal.keys import UnsafeName, object_key, object_label, task_id_new, undo_key
from journal.leases import Lease, TaskMoved, lease_call, settle_held
from journal.models import (
    GUARD_CONSTRAINT,
    ONCE_CONSTRAINT,
    UNDO_CONSTRAINT,
    Approval,
    EntryKind,
    ObjectLive,
    ObjectOnce,
    Step,
    StepKind,
    StepUndo,
    Task,
    TaskStatus,
)
from journal.outcomes import LIVE_STATES, StepState
from journal.policy import DEFAULT_POLICY, Policy
from journal.protocols import (
    Call,
    Finish,
    Refusal,
    Refused,
    Rules,
    StepFact,
    TaskFacts,
    Tool,
)
from journal.sagas import ApprovalNotUsable
from journal.summary import evidence_label

TASK_CONSTRAINTS = (GUARD_CONSTRAINT, ONCE_CONSTRAINT, UNDO_CONSTRAINT)


@dataclass(frozen=True)
class Checked:
    """A decision as the checks before recording it left it: its tool, its arguments as they
    will be frozen, the business object it acts on (its name for people and its normal form,
    docs/design.md §6), and either why it is refused or the step it undoes (if any)."""

    tool: Tool | None
    args: Any
    refused: Refused | None = None
    offsets: int | None = None
    guard: str | None = None
    guard_key: str | None = None
    args_text: str | None = None
    """The JSON the arguments were frozen as (None when they could not be)."""


def decision_check(
    *,
    decision: Call,
    tools: Mapping[str, Tool],
    rules: Rules | None,
    facts: TaskFacts | None,
) -> Checked:
    """Everything :func:`step_record` checks before asking the database: the tool is one the
    task may use, its arguments are valid, and ``rules`` find that it belongs to the task
    (judged by ``facts``). Writes nothing: a saga asks before holding a call for a person,
    so nobody is asked to approve what would be refused."""
    tool = tools.get(decision.tool)
    args_text: str | None = None
    try:
        args, args_text = _frozen(dict(decision.args))
        problems = tool.validate(args) if tool is not None else []
    except (TypeError, ValueError) as exc:
        args, problems = {"unserialisable": repr(decision.args)[:2000]}, [str(exc)]
    if tool is None:
        known = ", ".join(sorted(tools)) or "none"
        return Checked(
            tool,
            args,
            Refused(
                Refusal.UNKNOWN_TOOL,
                f"unknown tool {decision.tool!r} (this task may use: {known}); nothing was run",
            ),
        )
    guard = guard_key = None
    if not problems:
        raw_guard = tool.guard(args)
        try:
            guard = object_label(raw_guard) if raw_guard else None
            guard_key = object_key(raw_guard) if raw_guard else None
        except UnsafeName as exc:
            problems = [f"{exc}: the object it acts on cannot be named safely"]
    if problems:
        return Checked(
            tool,
            args,
            Refused(
                Refusal.INVALID_ARGUMENTS,
                "invalid arguments: " + "; ".join(problems) + "; nothing was sent",
            ),
        )
    if rules is None or facts is None:
        return Checked(tool, args, guard=guard, guard_key=guard_key, args_text=args_text)
    verdict = rules.check(tool=tool.name, args=args, facts=facts)
    if isinstance(verdict, Refused):
        return Checked(tool, args, verdict, guard=guard, guard_key=guard_key)
    return Checked(
        tool,
        args,
        offsets=verdict.offsets,
        guard=guard,
        guard_key=guard_key,
        args_text=args_text,
    )


def _json(value: Any) -> Any:
    return _frozen(value)[0]


def _frozen(value: Any) -> tuple[Any, str]:
    """``value`` frozen as what will be stored, and the JSON it is stored as: so every attempt
    sends what the journal holds."""
    text = json.dumps(value)
    if "\\u0000" in text and _NUL.search(text):
        # PostgreSQL's jsonb cannot hold it: refuse it here, as invalid, not as a crash.
        raise ValueError("a text contains a control character (NUL) that cannot be stored")
    return json.loads(text), text


# A NUL in any text of a value, as json.dumps writes it (\u0000, key or value): the escape
# itself, not a backslash written as text before "u0000" (an even run of backslashes).
_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


def task_create(
    *,
    kind: str,
    goal: str,
    refs: Mapping[str, Any] | None = None,
    actor: str = "",
    plan: list[dict[str, Any]] | None = None,
    task_id: UUID | None = None,
) -> Task:
    """Start a task: the task row and its first entry, in one statement (journal_task_create:
    one round trip, and in autocommit one commit). A saga's ``plan`` (validated by the
    caller) is frozen with it. Its id (``task_id_new``: now, and so the journal's range of
    now) is the caller's when given (older work, into its range)."""
    task = Task(
        id=task_id or task_id_new(),
        kind=kind,
        goal=goal,
        refs=_json(dict(refs or {})),
        plan=_json(plan or []),
    )
    data = {"goal": goal, **({"plan": task.plan} if task.plan else {})}
    task.created_at = call(
        "journal_task_create",
        id=task.id,
        kind=kind,
        goal=goal,
        refs=task.refs,
        plan=task.plan,
        entry=data,
        actor=actor,
    )
    task._state.adding = False
    task._state.db = connection.alias
    return task


def not_recorded(lease: Lease) -> Exception:
    """Why a record or finish wrote nothing though the lease held: the task moved (no longer
    runnable, unwinding, or a report contradicted the settlement held back)."""
    return TaskMoved(f"task {lease.task_id} changed under its runner")


def step_record(
    *,
    lease: Lease,
    decision: Call,
    tools: Mapping[str, Tool],
    rules: Rules | None = None,
    facts: TaskFacts | None = None,
    retries: int = 0,
    policy: Policy = DEFAULT_POLICY,
    undo_of: StepFact | None = None,
    approval: Approval | None = None,
    closing: bool = False,
) -> Step:
    """Record a decided call and start its first attempt, in one commit, before any call.

    The key is derived from the step's id (journal_step_key); nothing in ``decision`` can set
    it. A decision is recorded ``not_done``, and never runs, when it names an unknown tool,
    its arguments are invalid, the task's ``rules`` refuse it (``facts`` are what they judge
    by), or the object's guard refuses it (another effect live, or its once-only effect
    already done). Returns the step; it is ``pending`` exactly when the caller must now
    perform it. The settlement its runner held back goes first, in the same statement.

    ``undo_of`` makes the step a saga's compensation of that earlier step: linked to it and
    keyed from its key. ``closing`` is the harness's own last call of a task whose effects are
    undone (``Rules.closing``): recorded while it unwinds, as an undo is.
    ``approval`` is the person's approval of exactly this call: it is used
    up in the same statement (:class:`~journal.sagas.ApprovalNotUsable` if it no longer can
    be). Raises :class:`~journal.leases.TaskMoved` when the task moved and nothing was
    recorded, :class:`~journal.leases.LeaseLost` when the lease was taken over.
    """
    if rules is not None and undo_of is None and facts is None:
        from journal.selectors import task_facts_by_id

        facts = task_facts_by_id(task_id=lease.task_id)
    checked = decision_check(
        decision=decision, tools=tools, rules=None if undo_of else rules, facts=facts
    )
    raw, raw_text = _frozen_or_repr(decision.raw)
    refuse = _Refuser(
        lease=lease,
        decision=decision,
        args=checked.args,
        raw=raw,
        retries=retries,
        forward=not closing,
    )
    if checked.refused is not None:
        return refuse(checked.refused.code, checked.refused.reason, **dict(checked.refused.facts))
    tool, args = cast(Tool, checked.tool), checked.args  # known: it would be refused otherwise
    offsets = undo_of.n if undo_of is not None else checked.offsets
    guard, guard_key = checked.guard, checked.guard_key
    once = bool(guard_key) and tool.once(args)
    trusted = tool.key_lifetime * (1.0 - policy.key_margin)
    params: dict[str, Any] = {
        "tool": tool.name,
        "args": checked.args_text if checked.args_text is not None else args,
        "decision": raw_text if raw_text is not None else raw,
        # The step's row holds what was decided, frozen (its tool, arguments, object, once,
        # undo link, retries): its entry says only that it was recorded, by which runner (its
        # lease's owner: where it ran and which version, so that a step resumed after a deploy
        # can say who recorded it), with its key and its first attempt (journal_record adds
        # them), not all of that a second time.
        "entry": {"by": lease.owner},
        "forward": undo_of is None and not closing,
        "cost": str(tool.cost),
        "guard": guard,
        "guard_key": guard_key,
        "once": once,
        "offsets": offsets,
        "retries": retries,
        "undo_tool": tool.compensation or "",
        "trusted": trusted.total_seconds(),
        "lookup": (tool.key_lifetime + tool.lookup_lag).total_seconds(),
        "key": undo_key(undo_of.key, retries) if undo_of is not None else None,
        "approval": approval.pk if approval is not None else None,
    }
    row = _record(lease, params)
    if isinstance(row, str) and lease.held is not None:
        # A guard refused it, and nothing was written, the settlement held back included:
        # that goes first on its own (the claim in the way may have been its own step's),
        # then the record is asked for again.
        settle_held(lease)
        row = _record(lease, params)
    if isinstance(row, str):
        code, reason, held = _guard_refusal(
            row,
            tool=tool,
            guard=guard,
            guard_key=guard_key,
            offsets=offsets,
            task_id=lease.task_id,
        )
        return refuse(code, reason, guard=guard, guard_key=guard_key, **held)
    if row.step_id is None:
        raise not_recorded(lease)
    step = Step.written(
        id=row.step_id,
        task_id=lease.task_id,
        n=row.step_n,
        kind=StepKind.CALL,
        tool=tool.name,
        args=args,
        key=row.step_key,
        cost=tool.cost,
        guard=guard,
        guard_key=guard_key,
        once=once,
        retries=retries,
        undo_tool=tool.compensation or "",
        state=StepState.PENDING,
        attempts=1,
        lookups=0,
        decision=raw,
    )
    step.offsets_n = offsets  # type: ignore[attr-defined]
    lease.events.append(step_event("recorded", step, attempt=1))
    return step


def _record(lease: Lease, params: dict[str, Any]) -> Row | str:
    """journal_record under ``lease``; or, when a guard refused it (and nothing was
    written), the name of the guard's constraint."""
    try:
        # A savepoint inside a caller's transaction, so that a refusal by the database
        # leaves that transaction usable for the refusal's own record.
        with transaction.atomic() if connection.in_atomic_block else nullcontext():
            row: Row = lease_call(lease, "journal_record", **params)
            return row
    except NotUsable as exc:
        raise ApprovalNotUsable(str(exc)) from exc
    except IntegrityError as exc:
        constraint = next((c for c in TASK_CONSTRAINTS if c in str(exc)), None)
        if constraint is None:
            raise
        return constraint


def _guard_refusal(
    constraint: str,
    *,
    tool: Tool,
    guard: str | None,
    guard_key: str | None,
    offsets: int | None,
    task_id: Any,
) -> tuple[Refusal, str, dict[str, Any]]:
    """Why the database refused the step, told from the step that stands in its way: the
    step behind the claim it ran into (journal_step_claims), named as this decision named
    it. A once-only claim whose step is no longer kept tells it from what it kept."""
    once = None
    if constraint == UNDO_CONSTRAINT and offsets is not None:
        claim = StepUndo.objects.filter(offsets__task_id=task_id, offsets__n=offsets)
        holder_id = claim.values_list("step_id", flat=True).first()
    elif constraint == GUARD_CONSTRAINT:
        holder_id = (
            ObjectLive.objects.filter(guard_key=guard_key).values_list("step_id", flat=True).first()
        )
    else:
        once = ObjectOnce.objects.filter(guard_key=guard_key).first()
        holder_id = once.step_id if once is not None else None
    holder = Step.objects.filter(pk=holder_id).first() if holder_id is not None else None
    if holder is None and once is not None:
        holder = Step(
            key=once.key,
            tool=once.tool,
            state=StepState.DONE,
            settled_at=once.settled_at,
            outcome={"evidence": once.evidence},
        )
    if holder is None:  # it settled or was undone meanwhile: the decision may be made again
        return (
            Refusal.IN_FLIGHT,
            f"refused: another {tool.name} on the same object was in flight a moment ago; "
            "nothing was sent; decide again",
            {},
        )
    what = (guard or "").split(":", 1)[-1] or holder.tool
    if holder.state in LIVE_STATES:
        return (
            Refusal.IN_FLIGHT,
            f"refused: another {holder.tool} on {what} is in flight or unknown (reference "
            f"{holder.key}); this one was not started; do not start another meanwhile",
            {"refused_by": holder.key},
        )
    when = holder.settled_at.strftime("%Y-%m-%d %H:%M UTC") if holder.settled_at else "earlier"
    return (
        Refusal.ALREADY_DONE,
        f"already done: {holder.tool} for {what} ({evidence_label(holder.evidence)}) on "
        f"{when}, reference {holder.key}; this one was not started; do not do it again",
        # The first effect's evidence, named so that nobody takes it for this step's own: a
        # refused step carries none (the database refuses it, migration 0009).
        {"refused_by": holder.key, "first_evidence": holder.evidence},
    )


def _json_or_repr(value: Any) -> Any:
    return _frozen_or_repr(value)[0]


def _frozen_or_repr(value: Any) -> tuple[Any, str | None]:
    if value is None:
        return {}, "{}"
    try:
        return _frozen(value)
    except (TypeError, ValueError):
        return {"repr": repr(value)[:10000]}, None


class _Refuser:
    """Records a decision as ``not_done`` with the reason it was refused; nothing is sent.
    Through ``journal_record``, like any step: the task must be runnable and the lease ours."""

    def __init__(
        self,
        *,
        lease: Lease,
        decision: Call,
        args: Any,
        raw: Any,
        retries: int,
        forward: bool = True,
    ) -> None:
        self.lease, self.decision, self.args, self.raw = lease, decision, args, raw
        self.retries, self.forward = retries, forward

    def __call__(
        self,
        code: Refusal,
        reason: str,
        *,
        guard: str | None = None,
        guard_key: str | None = None,
        **facts: Any,
    ) -> Step:
        kind = {
            Refusal.UNKNOWN_TOOL: EntryKind.DECISION_REJECTED,
            Refusal.INVALID_ARGUMENTS: EntryKind.DECISION_REJECTED,
            Refusal.IN_FLIGHT: EntryKind.GUARD_REFUSED,
            Refusal.ALREADY_DONE: EntryKind.GUARD_REFUSED,
        }.get(code, EntryKind.DECISION_REFUSED)
        known = _json_or_repr(facts)
        outcome = {"proof": reason, "refusal": str(code), **known}
        tool = self.decision.tool[:100]
        row = lease_call(
            self.lease,
            "journal_record",
            tool=tool,
            args=self.args,
            decision=self.raw,
            entry=outcome,
            guard=guard,
            guard_key=guard_key,
            retries=self.retries,
            forward=self.forward,
            refusal=str(code),
            detail=reason,
            outcome=outcome,
            entry_kind=kind.value,
        )
        if row.step_id is None:
            raise not_recorded(self.lease)
        step = Step(
            pk=row.step_id,
            task_id=self.lease.task_id,
            n=row.step_n,
            kind=StepKind.CALL,
            tool=tool,
            args=self.args,
            key=row.step_key,
            guard=guard,
            guard_key=guard_key,
            refusal=code,
            retries=self.retries,
            state=StepState.NOT_DONE,
            detail=reason,
            outcome=outcome,
            decision=self.raw,
        )
        self.lease.events.append(step_event("refused", step, code=str(code), detail=reason[:300]))
        return step


def task_finish(
    *,
    lease: Lease,
    decision: Finish,
    summary: str,
    to: TaskStatus = TaskStatus.FINISHED,
    shortfall: bool = False,
) -> int:
    """Record the decision that the task is over; it is a step like any other. Returns the
    step's id (the run reads nothing back from it: a model of it cost more than its write).

    ``summary`` is what the task says it did, built from the journal's facts; the planner's
    own words are kept beside it, never shown as the truth. ``to`` is ``compensated`` for a
    saga whose every done effect was undone. The settlement the runner held back goes first,
    in the same statement, and the lease is given back with it.
    """
    outcome = {"evidence": {"summary": summary}, "planner_summary": decision.summary[:5000]}
    row = lease_call(
        lease,
        "journal_finish",
        to=str(to),
        shortfall=shortfall,
        detail=summary,
        outcome=outcome,
        decision=_json_or_repr(decision.raw),
        entry={"summary": summary},
    )
    if row.step_id is None:
        raise not_recorded(lease)
    lease.released = True  # the run ends here: given back in the same statement
    return int(row.step_id)
