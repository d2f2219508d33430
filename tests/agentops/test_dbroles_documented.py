"""docs/design.md §4 says, for every table whose columns agentops/dbroles.py lists, which
columns the app's role may update and why that is safe; this checks the two say the same,
so a column granted without its reason (or a reason left for a column no longer granted)
fails here."""

from __future__ import annotations

import re
from pathlib import Path

from agentops.dbroles import APP_COLUMNS, JOURNAL_PREFIX

DESIGN = Path(__file__).resolve().parents[2] / "docs" / "design.md"


def _section_4() -> str:
    text = DESIGN.read_text()
    start = text.index(
        "**What the app's role may write beside the journal, and why each is safe.**"
    )
    return text[start : text.index("\n## §5", start)]


def _documented() -> dict[str, tuple[set[str], list[str]]]:
    """Each table of the section's table: the columns it names, and its reasons."""
    found: dict[str, tuple[set[str], list[str]]] = {}
    table = ""
    for line in _section_4().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not line.startswith("|") or len(cells) != 3 or cells[0] == "table":
            continue
        if all(cell and set(cell) == {"-"} for cell in cells):  # the header's rule
            continue
        name, columns, why = cells
        if name:
            table = name.strip("`")
        named = set(re.findall(r"`(\w+)`", columns))
        known, reasons = found.setdefault(table, (set(), []))
        known.update(named)
        reasons.append(why)
    return found


def _plain(column: str) -> str:
    """``offset_by_id`` as the design names it: ``offset_by``."""
    return column.removesuffix("_id") if column.endswith("_by_id") else column


def test_every_listed_table_and_updatable_column_is_in_design_section_4_with_a_reason() -> None:
    documented = _documented()
    assert set(documented) == set(APP_COLUMNS), "tables in dbroles.py and design §4 differ"
    for table, columns in APP_COLUMNS.items():
        named, reasons = documented[table]
        assert named == {_plain(c) for c in columns.updatable}, table
        assert all(len(why) > 20 for why in reasons), f"{table}: say why it is safe"


def test_the_tables_the_app_only_reads_are_named_too() -> None:
    section = _section_4()
    for table in (f"{JOURNAL_PREFIX}*", "django_migrations"):
        assert f"`{table}`" in section, table
