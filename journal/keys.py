"""Names for intended actions (DESIGN §3).

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


def undo_key(key: str) -> str:
    return f"{key}:undo"
