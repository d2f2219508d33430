"""Each rule in one place: the docstrings that say "the one place" are checked against the
source (docs/design.md §4, §7; journal/README.md). The product is searched: journal,
agentops, sandbox. Migrations before the SQL moved into files (journal 0001–0009) are
history; tests and the tooling in devtools (which seeds a benchmark's database in bulk) may
write what they like."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from journal.sqlfiles import sql_newest

ROOT = Path(__file__).resolve().parents[1]
HISTORY = re.compile(r"journal/migrations/000\d_|agentops/migrations/000[1-3]_")


def _sources() -> dict[str, str]:
    """The product's sources. Of the SQL files, the newest version of each: an older one is
    history, like the migrations that loaded it."""
    files = [
        *ROOT.glob("journal/**/*.py"),
        *(file.path for file in sql_newest().values()),
        *ROOT.glob("agentops/**/*.py"),
        *ROOT.glob("sandbox/**/*.py"),
    ]
    found = {}
    for path in files:
        name = path.relative_to(ROOT).as_posix()
        if not HISTORY.match(name):
            found[name] = path.read_text()
    return found


def _where(pattern: str) -> list[str]:
    rule = re.compile(pattern, re.IGNORECASE | re.DOTALL)
    return sorted(name for name, text in _sources().items() if rule.search(text))


@pytest.mark.parametrize(
    ("what", "pattern", "place"),
    [
        ("an entry is written", r"INSERT INTO journal_entry\b", "journal/sql/journal_entry_add"),
        (
            "a task's status changes",
            r"UPDATE journal_task\b[^;\x22]*?\bSET\b(?:(?!\bWHERE\b)[^;\x22])*\bstatus\s*=",
            "journal/sql/journal_transition",
        ),
        (
            "a step settles",
            r"UPDATE journal_step\b[^;\x22]*\bsettled_at\s*=",
            "journal/sql/journal_settle",
        ),
        (
            "the lease is checked and extended",
            r"lease_expires_at\s*=\s*now\(\)[^;\x22]*\bWHERE\b[^;\x22]*lease_token\s*=\s*(p_token|%s)",
            "journal/sql/journal_fence",
        ),
        ("a step's key is formatted", r"'ao:'", "journal/sql/journal_step_key"),
    ],
)
def test_each_rule_is_written_in_one_place(what: str, pattern: str, place: str) -> None:
    where = _where(pattern)
    assert len(where) == 1 and where[0].startswith(place), f"{what}: {where}"


def test_python_writes_no_entry_and_changes_no_status_or_settlement_itself() -> None:
    python = {name: text for name, text in _sources().items() if name.endswith(".py")}
    orm_writes = re.compile(
        r"Entry\.objects\.(create|bulk_create|update)|Entry\(.*?\)\.save\(\)"
        r"|\.update\([^)]*\b(status|settled_at)\s*="
        r"|objects\.filter\([^)]*\)\.update\([^)]*state\s*=\s*StepState\.(DONE|NOT_DONE)",
        re.DOTALL,
    )
    offenders = sorted(name for name, text in python.items() if orm_writes.search(text))
    assert offenders == [], offenders


def _calls(text: str, function: str) -> list[str]:
    """The argument lists of every call of `function` in `text` (not its definition, nor
    the DROP of an old signature)."""
    found = []
    for match in re.finditer(rf"(?<!FUNCTION )(?<!EXISTS )\b{function}\(", text):
        depth, start = 1, match.end()
        for end in range(start, len(text)):
            depth += {"(": 1, ")": -1}.get(text[end], 0)
            if depth == 0:
                found.append(text[start:end])
                break
    return found


def _arguments(call: str) -> list[str]:
    """A call's arguments, split at the commas outside parentheses and brackets."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(call):
        depth += {"(": 1, "[": 1, ")": -1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(call[start:i])
            start = i + 1
    parts.append(call[start:])
    return [part.strip() for part in parts if part.strip()]


def test_sql_functions_are_called_with_named_arguments_only() -> None:
    """Every call of a journal function, from SQL or from Python, names each argument
    (p_x => ...): a function whose arguments are reordered or added to cannot then be handed
    a value in the wrong place."""
    functions = sorted(sql_newest())
    positional = []
    for name, text in _sources().items():
        if name.endswith(".py"):  # adjacent string literals are one string
            text = re.sub(r"\x22\s*\n\s*f?\x22", "", text)
        for function in functions:
            for call in _calls(text, function):
                for argument in _arguments(call):
                    if not re.match(r"p_\w+\s*=>", argument):
                        positional.append(f"{name}: {function}(… {argument} …)")
    assert positional == [], positional


def test_the_named_arguments_check_sees_a_positional_call() -> None:
    text = "PERFORM journal_entry_add(p_task => t, s, p_kind => k, f(a, b), p_data => d);"
    arguments = [_arguments(call) for call in _calls(text, "journal_entry_add")]
    assert arguments == [["p_task => t", "s", "p_kind => k", "f(a, b)", "p_data => d"]]
    definition = "CREATE OR REPLACE FUNCTION journal_entry_add(p_task uuid)"
    assert _calls(definition, "journal_entry_add") == []
