"""Entries: each written by the journal function whose move it records (docs/design.md §4).

No app role writes an entry of its own choosing: every move writes its own, in the same
statement (``journal_entry_add``, inside the functions). What a move may carry beside it is a
*note* about the step it moves (the lookup made, the attempt that ended, the provider's
notification received: ``journal_step_notes``), built here with :func:`note`; and what a
person or an app wants a task's history to say beside the journal's own moves is
``journal_note`` (:func:`task_note`). An entry is never updated or deleted afterwards.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from uuid import UUID

from journal.calls import call
from journal.models import EntryKind


def note(kind: EntryKind, *, actor: str = "", **data: Any) -> dict[str, Any]:
    """A note about a step, for a move that takes notes (``p_notes``) to write beside it."""
    return {"kind": str(kind), "actor": actor, "data": data}


def task_note(
    *,
    task_id: UUID,
    actor: str,
    action: str,
    step_id: int | None = None,
    data: Mapping[str, Any] | None = None,
) -> int:
    """A note on a task's history by a person or an app (``journal_note``): an operator
    action of its own (none of the journal's moves), optionally about one of its steps.
    Returns the entry's id."""
    return int(
        call(
            "journal_note",
            task=task_id,
            actor=actor,
            action=action,
            data=dict(data or {}),
            step=step_id,
        )
    )
