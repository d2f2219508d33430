"""Building entries: the one place an Entry is made (docs/design.md §4).

Services save their entries in the same transaction as the change they log; an entry is
never updated or deleted afterwards (PostgreSQL refuses it).
"""

from __future__ import annotations

from typing import Any

from journal.models import Entry, EntryKind


def entry(
    *,
    kind: EntryKind,
    task_id: Any,
    step_id: int | None = None,
    actor: str = "",
    **data: Any,
) -> Entry:
    """An unsaved entry, for the service that makes the change it logs to save."""
    return Entry(task_id=task_id, step_id=step_id, kind=kind, actor=actor, data=data)
