"""Business duplicates and their causes, from the ledgers alone, for every
harness (devtools.chaos.ledgers names the objects).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from devtools.chaos.audit.base import EXAMPLES
from devtools.chaos.ledgers import Ledgers, business_duplicates, by_cause
from devtools.chaos.plan import Plan


def duplicates_figures(
    *, plan: Plan, ledgers: Ledgers, owner: Callable[[str], int | None]
) -> dict[str, Any]:
    """``business_duplicates``, by cause (devtools.chaos.ledgers), and examples. ``owner``:
    which task of the plan (its ``n``) an effect's key belongs to."""
    root: dict[int, int] = {}
    for spec in plan.tasks:  # a task asked for twice names the one it repeats, earlier
        root[spec.n] = root.get(spec.repeats, spec.repeats) if spec.repeats else spec.n
    found = business_duplicates(
        ledgers, owner=owner, asked_twice=lambda a, b: root.get(a) == root.get(b)
    )
    return {
        "business_duplicates": len(found),
        "business_duplicates_by_cause": by_cause(found),
        "examples": [str(d) for d in found[:EXAMPLES]],
    }
