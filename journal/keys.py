"""Names for intended actions and for the business objects they act on (docs/design.md §3, §6).

A step's key is derived from its stable id ``<task id>:<n>`` and from nothing else: not the
attempt number, not anything the model said. Its format is written once, in SQL
(``journal/sql/journal_step_key``), and every key comes back from the statement that records
its step; here are only the prefix every key of ours starts with, and a compensation's key,
derived from its step's key.

A business object's name (``charge:INV-2291``, ``hotel:Alfama:Ada Lovelace:2027-03-01``) is
compared in one normal form, so that no look-alike spelling of a name makes a second effect
on the same object: Unicode NFKC, invisible and format characters removed, white space
removed, case folded (:func:`object_form`; the name kept for people has each run of white
space collapsed to one: :func:`object_name`). A name whose normal form does not fit its
column is stored as a digest of that normal form, behind a readable prefix: names are never
cut, so two long names that differ only at their end stay two objects.
"""

from __future__ import annotations

import hashlib
import os
import time
import unicodedata
from functools import lru_cache
from uuid import UUID

KEY_PREFIX = "ao"
"""What every key agentops makes starts with, before a colon: a step's (``journal_step_key``
writes it; tests/journal/test_sql_files.py checks that the two agree), a compensation's, a
notification's. It keeps our keys recognisable in a provider's dashboard and metadata."""


def task_id_new(at: float | None = None) -> UUID:
    """A new task's id: a UUID version 7 (RFC 9562), whose first 48 bits are the Unix time in
    milliseconds (``at``, or now) and the rest random. Ids made later sort after those made
    before, so a task, its steps and its entries fall in the journal's partition of the time
    it was made (docs/design.md §17), and one range of ids is one range of time."""
    ms = int((time.time() if at is None else at) * 1000)
    rand = int.from_bytes(os.urandom(10), "big")
    value = (
        (ms & 0xFFFF_FFFF_FFFF) << 80
        | 0x7 << 76  # the version
        | (rand >> 62 & 0xFFF) << 64
        | 0b10 << 62  # the variant
        | rand & (1 << 62) - 1
    )
    return UUID(int=value)


OBJECT_NAME_MAX = 255
"""The width of the columns that hold an object's name (``Step.guard``, ``Step.guard_key``)."""

# Unicode's Default_Ignorable_Code_Point (DerivedCoreProperties.txt): characters that are
# invisible when shown, outside the format category (Cf) that is removed as a whole.
_IGNORABLE = (
    (0x00AD, 0x00AD),
    (0x034F, 0x034F),
    (0x061C, 0x061C),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180F),
    (0x200B, 0x200F),
    (0x202A, 0x202E),
    (0x2060, 0x206F),
    (0x3164, 0x3164),
    (0xFE00, 0xFE0F),
    (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0),
    (0xFFF0, 0xFFF8),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0000, 0xE0FFF),
)

# Spaces that show no width (U+200B was one, Zs, until Unicode 4.0.1), read as spaces in the
# name people see. Every other invisible character is removed.
_ZERO_WIDTH_SPACES = frozenset("\u200b\u180e")
# Letters that show as blanks (Braille's blank pattern, the Hangul fillers are ignorable
# already): white space for comparing.
_BLANKS = frozenset("\u2800")

# Characters a name cannot be normalised with safely, so it is refused: controls (C0, C1),
# surrogates, private-use and unassigned code points, line and paragraph separators.
_UNSAFE_CATEGORIES = {
    "Cc": "a control character",
    "Cs": "a surrogate",
    "Co": "a private-use character",
    "Cn": "an unassigned character",
    "Zl": "a line separator",
    "Zp": "a paragraph separator",
}


class UnsafeName(ValueError):
    """A name that cannot be normalised safely: refused, never guessed at."""


def step_id(task_id: UUID | str, n: int) -> str:
    return f"{task_id}:{n}"


def is_our_key(reference: str) -> bool:
    """Whether a provider's reference (a key in its metadata, a booking's reference) is one of
    the keys agentops makes."""
    return reference.startswith(f"{KEY_PREFIX}:")


def undo_key(key: str, retries: int = 0) -> str:
    """The key of the compensation of the step keyed ``key``. A compensation that provably
    never left (refused connection) is tried again as a new step: ``…:undo``, ``…:undo2``."""
    return f"{key}:undo" if retries == 0 else f"{key}:undo{retries + 1}"


def _invisible(char: str) -> bool:
    if unicodedata.category(char) == "Cf":
        return True
    point = ord(char)
    return any(low <= point <= high for low, high in _IGNORABLE)


def name_problem(raw: str) -> str | None:
    """Why ``raw`` cannot be normalised safely as (part of) an object's name, or None."""
    if raw.isascii() and raw.isprintable():  # no control, nothing invisible: only blanks
        return "has nothing visible in it" if raw.isspace() else None
    for char in raw:
        what = _UNSAFE_CATEGORIES.get(unicodedata.category(char))
        if what is not None:
            return f"contains {what} (U+{ord(char):04X})"
    if raw and not _visible(raw):
        return "has nothing visible in it"
    return None


def _visible(raw: str) -> str:
    """``raw`` in NFKC with its invisible characters and white space removed."""
    return "".join(
        c
        for c in unicodedata.normalize("NFKC", raw)
        if not (c.isspace() or c in _BLANKS or _invisible(c))
    )


@lru_cache(maxsize=4096)
def object_name(raw: str) -> str:
    """A business object's name as people read it: NFKC, zero-width spaces read as spaces and
    every other invisible character removed, each
    ``:``-separated part with its white space collapsed and trimmed. Case is kept. Raises
    :class:`UnsafeName` for a name that cannot be normalised safely, or that has an empty
    part once normalised."""
    problem = name_problem(raw)
    if problem is not None:
        raise UnsafeName(f"the name {raw[:80]!r} {problem}")
    text = (
        raw  # NFKC leaves ASCII as it is, and ASCII has no invisible characters
        if raw.isascii()
        else "".join(
            " " if c in _ZERO_WIDTH_SPACES else c
            for c in unicodedata.normalize("NFKC", raw)
            if c in _ZERO_WIDTH_SPACES or not _invisible(c)
        )
    )
    parts = [" ".join(part.split()) for part in text.split(":")]
    if not all(parts):
        raise UnsafeName(f"the name {raw[:80]!r} has an empty part once normalised")
    return ":".join(parts)


@lru_cache(maxsize=4096)
def object_form(raw: str) -> str:
    """The one normal form names are compared in: :func:`object_name`, case folded (and
    NFKC again, as folding can leave a character that NFKC would change), with no white
    space at all. A space that shows no width (U+200B) can sit anywhere in a word, so
    white space never tells two names apart: ``Ada Lovelace``, ``AdaLovelace`` and
    ``Ada Love\u200blace`` are one name. Merging two names is the safe side for a guard."""
    name = object_name(raw)
    if name.isascii():
        # NFKC leaves ASCII as it is, folding keeps it ASCII, and of it only white space is
        # blank: what splitting on white space takes out.
        return "".join(name.lower().split())
    folded = unicodedata.normalize("NFKC", name.casefold())
    return "".join(c for c in folded if not (c.isspace() or c in _BLANKS))


def object_key(raw: str) -> str:
    """What the guards compare (``Step.guard_key``): the normal form, or, when that is longer
    than the column, a readable prefix of it and the SHA-256 of all of it."""
    form = object_form(raw)
    if len(form) <= OBJECT_NAME_MAX:
        return form
    digest = hashlib.sha256(form.encode()).hexdigest()
    return f"{form[: OBJECT_NAME_MAX - len(digest) - 2]}…#{digest}"


def object_label(raw: str) -> str:
    """The name as stored for people (``Step.guard``): :func:`object_name`, shortened with an
    ellipsis when it does not fit. Never compared: :func:`object_key` is."""
    name = object_name(raw)
    return name if len(name) <= OBJECT_NAME_MAX else name[: OBJECT_NAME_MAX - 1] + "…"


def same_object(a: str, b: str) -> bool:
    """Whether two names (or parts of names, such as invoice numbers) are one object. A name
    that cannot be normalised safely is the same as nothing."""
    try:
        return object_form(a) == object_form(b)
    except UnsafeName:
        return False
