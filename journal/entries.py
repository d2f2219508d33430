"""Entries: built here, written by ``journal_entry_add`` (journal/sql), the one place an entry
is made (docs/design.md §4).

Services build their entries with :func:`entry` and write them with :func:`entries_add`, in
the same transaction as the change they log; the SQL functions that record, settle and
change a status call ``journal_entry_add`` themselves. An entry is never updated or deleted
afterwards (PostgreSQL refuses it).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection

from journal.models import Entry, EntryKind


def entry(
    *,
    kind: EntryKind,
    task_id: Any,
    step_id: int | None = None,
    actor: str = "",
    **data: Any,
) -> Entry:
    """An unsaved entry, for :func:`entries_add` to write."""
    return Entry(task_id=task_id, step_id=step_id, kind=kind, actor=actor, data=data)


def entries_json(entries: Iterable[Entry]) -> str:
    """Entries as ``journal_entries_add`` and ``journal_settle``'s ``p_extra`` take them."""
    return json.dumps(
        [
            {
                "task": str(e.task_id),
                "step": e.step_id,
                "kind": str(e.kind),
                "actor": e.actor,
                "data": e.data,
            }
            for e in entries
        ],
        cls=DjangoJSONEncoder,
    )


def entries_add(*entries: Entry) -> None:
    """Write ``entries``, in order, in one statement (nothing when there are none)."""
    if not entries:
        return
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT journal_entries_add(p_entries => %s::jsonb)", [entries_json(entries)]
        )
