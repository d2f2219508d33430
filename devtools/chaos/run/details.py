"""What a chaos run keeps beside its logs (``details.json``): the journal of each
task that was slow to move again after a fault, and of each task the run's verdict holds
against it (left unknown, or handed to a person the plan did not mean).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from devtools.chaos.run.base import db_or
from journal.models import Entry, EntryKind


def timelines(samples: list[dict[str, Any]], *, slower_than: float) -> dict[str, Any]:
    """The journal of each task that took long to move again after a fault, for a person
    looking into why (written beside the run's logs)."""
    slow = {s["task"]: s for s in samples if s["took"] is None or s["took"] > slower_than}
    entries = journals(list(slow))
    return {t: {"sample": s, "entries": entries.get(t, [])} for t, s in slow.items()}


def journals(tasks: list[str]) -> dict[str, list[list[Any]]]:
    """Each task's journal entries, oldest first, as ``[at, kind, actor, data]``; a recorded
    step's data with the call its row holds (its tool, arguments and object), which its entry
    does not repeat."""
    wanted = [t for t in tasks if is_uuid(t)]
    if not wanted:
        return {}
    rows: list[tuple[uuid.UUID, datetime, str, str, Any, str | None, Any, str | None]] = db_or(
        lambda: list(
            Entry.objects.filter(task_id__in=wanted)
            .order_by("id")
            .values_list(
                "task_id", "at", "kind", "actor", "data", "step__tool", "step__args", "step__guard"
            )
        ),
        [],
    )
    out: dict[str, list[list[Any]]] = {}
    for task_id, at, kind, actor, data, tool, args, guard in rows:
        if kind == EntryKind.STEP_RECORDED:
            data = {**(data or {}), "tool": tool, "args": args, "guard": guard}
        out.setdefault(str(task_id), []).append([at.timestamp(), kind, actor, data])
    return out


def is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True
