"""What the API does that the runner does not: starting a task, unless the effect it is for
already stands done."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from agentops.effects import task_start
from agentops.kinds import REQUIRED, Ref, UnknownKind, kind_get, task_problems, tool_registry
from journal.keys import UnsafeName, object_key
from journal.models import Step, StepKind, Task
from journal.outcomes import StepState


@dataclass(frozen=True)
class AlreadyDone:
    """A once-only effect a new task would make, already done (and not undone)."""

    tool: str
    object: str
    evidence: dict[str, Any]
    step_key: str
    task_id: UUID
    settled_at: datetime | None


def once_effect_done(*, kind: str, goal: Any, refs: Any, plan: Any = None) -> AlreadyDone | None:
    """The kind's first once-only effect, if the refs alone determine it and the journal
    already holds it done: then a new task for it would only be told "already done".

    The effect is the first tool, in the kind's order (a saga's plan, or else the order of
    its ``binds``), whose every argument is bound to the refs by a ``Ref`` bind (a renewal's
    ``charge_customer``: invoice, amount, currency, payment method, customer), built as the
    bind reads it (an absent ref is its default, or leaves the argument out), valid for the
    tool, and once per object (``tool.once``). Its object is ``tool.guard(args)``, compared
    in the journal's normal form (``object_key``) against a call step that is done, once
    and not offset: exactly what the once-per-object guard would refuse a second of.

    None — start the task, the journal's guards still hold — when the kind is unknown, the
    goal or refs are refused (``task_start`` names every problem), no tool is determined by
    the refs alone (an email's purpose is the planner's), or the effect is not done: one in
    flight or unknown is waited for by the task itself.

    What it reads of ``agentops.kinds`` (its only use of it): ``kind_get``, ``UnknownKind``,
    ``task_problems``, a kind's ``binds`` and ``saga.steps``, and ``Ref``'s ``arg``, ``ref``
    and ``default`` (with ``REQUIRED``).
    """
    try:
        task_kind = kind_get(kind)
    except UnknownKind:
        return None
    if not isinstance(refs, Mapping) or task_problems(kind=task_kind, goal=goal, refs=refs):
        return None
    if plan and task_kind.saga is None:
        return None  # refused by task_start: only a saga takes a plan
    if isinstance(plan, list) and plan:
        order = [e.get("tool") for e in plan if isinstance(e, Mapping)]
    elif task_kind.saga is not None:
        order = list(task_kind.saga.steps)
    else:
        order = list(task_kind.binds)
    tools = tool_registry()
    for name in order:
        binds = task_kind.binds.get(name, ()) if isinstance(name, str) else ()
        tool = tools.get(name) if isinstance(name, str) else None
        if tool is None or not binds or not all(isinstance(b, Ref) for b in binds):
            continue
        args = {}
        for bind in (b for b in binds if isinstance(b, Ref)):
            value = refs.get(bind.ref, None if bind.default is REQUIRED else bind.default)
            if value is not None:
                args[bind.arg] = value
        if tool.validate(args) or not tool.once(args):
            continue
        guard = tool.guard(args)
        if guard is None:
            continue
        try:
            key = object_key(guard)
        except UnsafeName:
            return None
        done = (
            Step.objects.filter(
                guard_key=key,
                kind=StepKind.CALL,
                state=StepState.DONE,
                once=True,
                offset_by__isnull=True,
            )
            .order_by("settled_at", "pk")
            .first()
        )
        if done is None:
            return None
        return AlreadyDone(
            tool=done.tool,
            object=done.guard or guard,
            evidence=done.evidence,
            step_key=done.key,
            task_id=done.task_id,
            settled_at=done.settled_at,
        )
    return None


def task_start_unless_done(
    *, kind: str, goal: Any, refs: Any, plan: Any, actor: str
) -> Task | AlreadyDone:
    """Start a task (``agentops.effects.task_start``: refused with every problem named, or
    recorded and rung for) — unless the effect it is for already stands done
    (:func:`once_effect_done`), which is answered instead and nothing is started."""
    done = once_effect_done(kind=kind, goal=goal, refs=refs, plan=plan)
    if done is not None:
        return done
    return task_start(kind=kind, goal=goal, refs=refs, actor=actor, plan=plan)
