"""Writing decisions down before anything acts on them (docs/design.md §4, §6)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, cast
from uuid import UUID

from django.core.serializers.json import DjangoJSONEncoder
from django.db import IntegrityError, connection, transaction

from journal.db import prepared_cursor
from journal.keys import UnsafeName, object_key, object_label, task_id_new, undo_key
from journal.leases import Deferred, Lease, LeaseLost, deferred_write, lease_seconds
from journal.models import (
    GUARD_CONSTRAINT,
    ONCE_CONSTRAINT,
    UNDO_CONSTRAINT,
    Approval,
    ApprovalState,
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
from journal.sagas import ApprovalNotUsable, digest
from journal.settle import settled_otherwise
from journal.summary import evidence_label

TASK_CONSTRAINTS = (GUARD_CONSTRAINT, ONCE_CONSTRAINT, UNDO_CONSTRAINT)

# journal_task_create (journal/sql): the task's row and its first entry.
TASK_CREATE = (
    "SELECT journal_task_create(p_task => %s::jsonb, p_entry => %s::jsonb, p_actor => %s::text)"
)
# journal_record (journal/sql): fence, number, insert the step (or its refusal) and its entry.
RECORD = (
    "SELECT * FROM journal_record(p_task => %(task)s::uuid, p_token => %(token)s::bigint, "
    "p_lease => %(lease)s::float8, p_tool => %(tool)s::text, p_args => %(args)s::jsonb, "
    "p_decision => %(decision)s::jsonb, p_entry => %(entry)s::jsonb, "
    "p_forward => %(forward)s::boolean, p_cost => %(cost)s::text, p_guard => %(guard)s::text, "
    "p_guard_key => %(guard_key)s::text, p_once => %(once)s::boolean, "
    "p_offsets => %(offsets)s::integer, p_retries => %(retries)s::integer, "
    "p_undo_tool => %(undo_tool)s::text, p_trusted => %(trusted)s::float8, "
    "p_lookup => %(lookup)s::float8, p_key => %(key)s::text, p_refusal => %(refusal)s::text, "
    "p_detail => %(detail)s::text, p_outcome => %(outcome)s::jsonb, "
    "p_entry_kind => %(entry_kind)s::text)"
)
# journal_settle_record (journal/sql): the settlement the runner held back, then the record.
SETTLE_RECORD = (
    "SELECT * FROM journal_settle_record(p_step => %(s_step)s::bigint, "
    "p_state => %(s_state)s::text, p_detail => %(s_detail)s::text, "
    "p_outcome => %(s_outcome)s::jsonb, p_settled => %(s_entry)s::jsonb, "
    "p_task => %(task)s::uuid, p_token => %(token)s::bigint, "
    "p_lease => %(lease)s::float8, p_tool => %(tool)s::text, p_args => %(args)s::jsonb, "
    "p_decision => %(decision)s::jsonb, p_entry => %(entry)s::jsonb, "
    "p_forward => %(forward)s::boolean, p_cost => %(cost)s::text, p_guard => %(guard)s::text, "
    "p_guard_key => %(guard_key)s::text, p_once => %(once)s::boolean, "
    "p_offsets => %(offsets)s::integer, p_retries => %(retries)s::integer, "
    "p_undo_tool => %(undo_tool)s::text, p_trusted => %(trusted)s::float8, "
    "p_lookup => %(lookup)s::float8)"
)
# journal_settle_finish (journal/sql): the settlement the runner held back, then the finish.
SETTLE_FINISH = (
    "SELECT * FROM journal_settle_finish(p_step => %(s_step)s::bigint, "
    "p_state => %(s_state)s::text, p_detail => %(s_detail)s::text, "
    "p_outcome => %(s_outcome)s::jsonb, p_settled => %(s_entry)s::jsonb, "
    "p_task => %(task)s::uuid, p_token => %(token)s::bigint, p_lease => %(lease)s::float8, "
    "p_to => %(to)s::text, p_shortfall => %(shortfall)s::boolean, "
    "p_summary => %(detail)s::text, p_finished => %(outcome)s::jsonb, "
    "p_decision => %(decision)s::jsonb, p_entry => %(entry)s::jsonb)"
)
# journal_finish (journal/sql): fence, number, finish the task and give the lease back,
# insert the finish step.
FINISH = (
    "SELECT * FROM journal_finish(p_task => %(task)s::uuid, p_token => %(token)s::bigint, "
    "p_lease => %(lease)s::float8, p_to => %(to)s::text, p_shortfall => %(shortfall)s::boolean, "
    "p_detail => %(detail)s::text, p_outcome => %(outcome)s::jsonb, "
    "p_decision => %(decision)s::jsonb, p_entry => %(entry)s::jsonb)"
)


def _record_params(
    lease: Lease,
    *,
    tool: str,
    args: Any,
    decision: Any,
    args_text: str | None = None,
    decision_text: str | None = None,
    **more: Any,
) -> dict[str, Any]:
    """journal_record's arguments, its defaults filled in. ``args_text`` and ``decision_text``:
    the JSON they were frozen as, when the caller has it (not written out again)."""
    return {
        "task": lease.task_id,
        "token": lease.token,
        "lease": lease_seconds(),
        "tool": tool,
        "args": json.dumps(args) if args_text is None else args_text,
        "decision": json.dumps(decision) if decision_text is None else decision_text,
        "forward": True,
        "cost": "",
        "guard": None,
        "guard_key": None,
        "once": False,
        "offsets": None,
        "retries": 0,
        "undo_tool": "",
        "trusted": 0.0,
        "lookup": 0.0,
        "key": None,
        "refusal": "",
        "detail": "",
        "outcome": "{}",
        "entry_kind": EntryKind.STEP_RECORDED.value,
        **more,
    }


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


class TaskMoved(Exception):
    """The lease is still ours, but someone else changed the task (a person, a conflicting
    report): nothing was recorded; read the task again before deciding anything."""


def not_recorded(lease: Lease) -> Exception:
    """Why a fenced statement changed nothing: the lease was taken over, or the task moved."""
    token = Task.objects.filter(pk=lease.task_id).values_list("lease_token", flat=True).first()
    if token != lease.token:
        return LeaseLost.of(lease)
    return TaskMoved(f"task {lease.task_id} changed under its runner")


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
    # The row as the model makes it, its defaults filled in; when it was made is the
    # database's to say.
    row = {
        field.column: getattr(task, field.attname)
        for field in Task._meta.concrete_fields
        if field.attname != "created_at"
    }
    data = {"goal": goal, **({"plan": task.plan} if task.plan else {})}
    with prepared_cursor() as cursor:
        cursor.execute(
            TASK_CREATE,
            [json.dumps(row, cls=DjangoJSONEncoder), json.dumps(data), actor],
        )
        (task.created_at,) = cursor.fetchone()
    task._state.adding = False
    task._state.db = connection.alias
    return task


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
) -> Step:
    """Record a decided call and start its first attempt, in one commit, before any call.

    The key is derived here from the step's id; nothing in ``decision`` can set it. A
    decision is recorded ``not_done``, and never runs, when it names an unknown tool, its
    arguments are invalid, the task's ``rules`` refuse it (``facts`` are what they judge
    by), or the object's guard refuses it (another effect live, or its once-only effect
    already done). Returns the step; it is ``pending`` exactly when the caller must now
    perform it.

    ``undo_of`` makes the step a saga's compensation of that earlier step: linked to it and
    keyed from its key. ``approval`` is the person's approval of exactly this call: it is used
    up in the same commit (:class:`~journal.sagas.ApprovalNotUsable` if it no longer can be).
    """
    if rules is not None and undo_of is None and facts is None:
        from journal.selectors import task_facts_by_id

        facts = task_facts_by_id(task_id=lease.task_id)
    checked = decision_check(
        decision=decision, tools=tools, rules=None if undo_of else rules, facts=facts
    )
    unsettled = lease.deferred
    if unsettled is not None and (
        checked.refused is not None
        or undo_of is not None
        or approval is not None
        or connection.in_atomic_block
    ):
        deferred_write(lease)  # only a plain record carries the settlement held back
        unsettled = None
    raw, raw_text = _frozen_or_repr(decision.raw)
    refuse = _Refuser(lease=lease, decision=decision, args=checked.args, raw=raw, retries=retries)
    if checked.refused is not None:
        return refuse(checked.refused.code, checked.refused.reason, **dict(checked.refused.facts))
    tool, args = cast(Tool, checked.tool), checked.args  # known: it would be refused otherwise
    offsets = undo_of.n if undo_of is not None else checked.offsets
    guard, guard_key = checked.guard, checked.guard_key
    once = bool(guard_key) and tool.once(args)
    trusted = tool.key_lifetime * (1.0 - policy.key_margin)
    params = _record_params(
        lease,
        tool=tool.name,
        args=args,
        decision=raw,
        args_text=checked.args_text,
        decision_text=raw_text,
        forward=undo_of is None,
        cost=str(tool.cost),
        guard=guard,
        guard_key=guard_key,
        once=once,
        offsets=offsets,
        retries=retries,
        undo_tool=tool.compensation or "",
        trusted=trusted.total_seconds(),
        lookup=(tool.key_lifetime + tool.lookup_lag).total_seconds(),
        key=undo_key(undo_of.key, retries) if undo_of is not None else None,
        # The step's row holds what was decided, frozen (its tool, arguments, object, once,
        # undo link, retries): its entry says only that it was recorded, with its key and its
        # first attempt (journal_record adds them), not all of that a second time.
        entry="{}",
    )
    try:
        # One statement, so one round trip and its own commit (a savepoint inside a caller's
        # transaction, so a refusal by the database leaves that transaction usable).
        with (
            transaction.atomic()
            if approval is not None or connection.in_atomic_block
            else (nullcontext())
        ):
            if unsettled is not None:
                row = _settle_and_write(lease, unsettled, params, SETTLE_RECORD)
            else:
                with prepared_cursor() as cursor:
                    cursor.execute(RECORD, params)
                    row = cursor.fetchone()
            if row is None:
                raise not_recorded(lease)
            step = Step.written(
                id=row[0],
                task_id=lease.task_id,
                n=row[1],
                kind=StepKind.CALL,
                tool=tool.name,
                args=args,
                key=row[2],
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
            lease.versions.append(int(row[3]))
            step.offsets_n = offsets  # type: ignore[attr-defined]
            if approval is not None:
                used = Approval.objects.filter(
                    pk=approval.pk,
                    state=ApprovalState.APPROVED,
                    digest=digest(tool.name, args),
                ).update(state=ApprovalState.USED, used_by=step)
                if not used:
                    raise ApprovalNotUsable(f"approval {approval.pk} is not for this call now")
    except IntegrityError as exc:
        constraint = next((c for c in TASK_CONSTRAINTS if c in str(exc)), None)
        if constraint is None:
            raise
        if unsettled is not None:
            # The guard refused the record, so nothing was written: the settlement goes
            # first on its own, then the refusal.
            lease.deferred = unsettled
            deferred_write(lease)
        code, reason, held = _guard_refusal(
            constraint,
            tool=tool,
            guard=guard,
            guard_key=guard_key,
            offsets=offsets,
            task_id=lease.task_id,
        )
        return refuse(code, reason, guard=guard, guard_key=guard_key, **held)
    return step


def _settle_and_write(
    lease: Lease, held: Deferred, params: dict[str, Any], statement: str
) -> tuple[Any, ...] | None:
    """journal_settle_record or journal_settle_finish (``statement``): the step settled by
    the attempt the runner made (``held``) and the next step's record or the finish, in one
    statement and one commit. Returns the written step's row (step id, number, key, task
    version) like journal_record's and journal_finish's, or None if nothing was written
    because the lease was lost or the task moved. A step that had settled otherwise
    meanwhile is a conflict, recorded as any other report's, and the task is read again."""
    lease.deferred = None
    settle = held.params
    with prepared_cursor() as cursor:
        cursor.execute(
            statement,
            {
                **params,
                **{f"s_{k}": settle[k] for k in ("step", "state", "detail", "outcome")},
                "s_entry": settle["entry"],
            },
        )
        row = cursor.fetchone()
    if row is None:
        return None
    changed, settled_version, settled_state, settled_key, step_id, n, key, version = row
    if step_id is None:
        # Settled alone. Recorded as well, both wrote the one version the record returns.
        lease.versions.append(int(settled_version))
    if not changed:
        settled_otherwise(settle, state=settled_state, key=settled_key, task_id=lease.task_id)
        if settled_state != settle["state"]:
            raise TaskMoved(f"step {settled_key} was settled {settled_state} meanwhile")
    if step_id is None:
        return None
    return (step_id, n, key, version)


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

    def __init__(self, *, lease: Lease, decision: Call, args: Any, raw: Any, retries: int) -> None:
        self.lease, self.decision, self.args, self.raw = lease, decision, args, raw
        self.retries = retries

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
        params = _record_params(
            self.lease,
            tool=self.decision.tool[:100],
            args=self.args,
            decision=self.raw,
            guard=guard,
            guard_key=guard_key,
            retries=self.retries,
            refusal=str(code),
            detail=reason,
            outcome=json.dumps(outcome),
            entry=json.dumps({"proof": reason, "refusal": str(code), **known}),
            entry_kind=kind.value,
        )
        deferred_write(self.lease)
        with prepared_cursor() as cursor:
            cursor.execute(RECORD, params)
            row = cursor.fetchone()
        if row is None:
            raise not_recorded(self.lease)
        self.lease.versions.append(int(row[3]))
        return Step(
            pk=row[0],
            task_id=self.lease.task_id,
            n=row[1],
            kind=StepKind.CALL,
            tool=params["tool"],
            args=self.args,
            key=row[2],
            guard=guard,
            guard_key=guard_key,
            refusal=code,
            retries=self.retries,
            state=StepState.NOT_DONE,
            detail=reason,
            outcome=outcome,
            decision=self.raw,
        )


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
    saga whose every done effect was undone.
    """
    outcome = {"evidence": {"summary": summary}, "planner_summary": decision.summary[:5000]}
    raw = _json_or_repr(decision.raw)
    params: dict[str, Any] = {
        "task": lease.task_id,
        "token": lease.token,
        "lease": lease_seconds(),
        "to": str(to),
        "shortfall": shortfall,
        "detail": summary,
        "outcome": json.dumps(outcome),
        "decision": json.dumps(raw),
        "entry": json.dumps({"summary": summary}),
    }
    unsettled = lease.deferred
    if unsettled is not None and not connection.in_atomic_block:
        # The last settlement and the finish, in one commit (journal_settle_finish).
        row = _settle_and_write(lease, unsettled, params, SETTLE_FINISH)
    else:
        deferred_write(lease)
        with prepared_cursor() as cursor:
            cursor.execute(FINISH, params)
            row = cursor.fetchone()
    if row is None:
        raise not_recorded(lease)
    lease.versions.append(int(row[3]))
    lease.released = True  # the run ends here: given back in the same statement
    return int(row[0])
