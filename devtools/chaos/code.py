"""The code a chaos run ran, and whether a run's figures are the current code's.

A run records with its figures (``code``) the checkout's commit, the tree of each of the
product's paths at that commit (``product``; :data:`PRODUCT`: the journal, the harness, the
shipped kinds, the stand-in providers and the chaos run itself, what the figures describe),
and whether those paths held exactly what was committed, nothing changed or untracked in them
(``clean``). Work in progress elsewhere in the checkout (the benchmark, the tests, the docs)
is not what the run ran, and does not make it unclean.

The figures' renderer (devtools.chaos.figures) compares each run's product with the current
commit's (:func:`code_differs`), and will not write figures of other code. Standard library
only: the renderer runs without Django.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from typing import Any

from devtools.process import REPO

PRODUCT = ("journal", "agentops", "commerce", "sandbox", "devtools/chaos")
"""The paths whose code a run's figures describe (each compared by its git tree)."""


def _git(*args: str) -> str | None:
    """git's answer, stripped; None when git cannot tell (no git, not a checkout)."""
    try:
        done = subprocess.run(  # noqa: S603 - git, with our own arguments
            ["git", "-C", str(REPO), *args],  # noqa: S607 - git from the PATH
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip()


def product_trees(commit: str = "HEAD") -> dict[str, str] | None:
    """Each of :data:`PRODUCT`'s tree ids at ``commit``; None when git cannot tell."""
    answer = _git("rev-parse", *(f"{commit}:{path}" for path in PRODUCT))
    ids = answer.split() if answer is not None else []
    if len(ids) != len(PRODUCT):
        return None
    return dict(zip(PRODUCT, ids, strict=True))


def code_ran() -> dict[str, Any]:
    """The code a run ran: the checkout's commit, its product's trees, and whether the
    product's files were as committed (``clean``); None for any of them git cannot tell."""
    commit = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--untracked-files=all", "--", *PRODUCT)
    return {
        "commit": commit,
        "clean": None if status is None else not status,
        "product": product_trees(commit) if commit else None,
    }


def code_differs(code: Mapping[str, Any] | None, current: Mapping[str, str] | None) -> str | None:
    """Why figures recorded with ``code`` (a run's ``code``) are not of the current product
    (``current``: :func:`product_trees` of the current commit), or None when they are."""
    if not code or not code.get("commit"):
        return "records no commit: it predates the record, or git could not tell"
    commit = str(code["commit"])[:10]
    if code.get("clean") is not True:
        return f"ran {commit} with the product's files changed or added (not as committed)"
    product = code.get("product")
    if not product:
        return f"ran {commit}, and records no tree of the product"
    if current is None:
        return "the current commit's product cannot be read (git could not tell)"
    changed = [path for path in PRODUCT if product.get(path) != current.get(path)]
    if changed:
        return f"ran {commit}, whose {', '.join(changed)} differ from the current commit's"
    return None
