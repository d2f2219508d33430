"""Names for intended actions (docs/design.md §3).

A step's key is derived from its stable id ``<task id>:<n>`` and from nothing else: not the
attempt number, not anything the model said. A compensation's key is derived from its
step's key.
"""

from __future__ import annotations

from uuid import UUID

KEY_PREFIX = "ao"


def step_id(task_id: UUID | str, n: int) -> str:
    return f"{task_id}:{n}"


def step_key(task_id: UUID | str, n: int) -> str:
    # The prefix keeps our keys recognisable in a provider's dashboard and metadata.
    return f"{KEY_PREFIX}:{step_id(task_id, n)}"


def undo_key(key: str, retries: int = 0) -> str:
    """The key of the compensation of the step keyed ``key``. A compensation that provably
    never left (refused connection) is tried again as a new step: ``…:undo``, ``…:undo2``."""
    return f"{key}:undo" if retries == 0 else f"{key}:undo{retries + 1}"


def object_name(raw: str) -> str:
    """A business object's name as stored: each ``:``-separated part without surrounding
    spaces. Case is kept for people to read; the guards compare names case-insensitively
    (their unique indexes are on ``lower(guard)``), so ``charge: INV-2291 `` and
    ``charge:inv-2291`` are one object (docs/design.md §6)."""
    return ":".join(part.strip() for part in raw.split(":"))[:255]


def same_object(a: str, b: str) -> bool:
    """Whether two names (or parts of names, such as invoice numbers) are one object."""
    return object_name(a).casefold() == object_name(b).casefold()
