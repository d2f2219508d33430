"""Each rule in one place: the docstrings that say "the one place" are checked against the
source (docs/design.md §4, §7; journal/README.md). The product is searched: journal,
agentops, sandbox and commerce (the shipped kinds). Migrations before the SQL moved into
files (journal 0001–0009) are history; tests and the tooling in devtools (which seeds a
benchmark's database in bulk) may write what they like."""

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
        *ROOT.glob("commerce/**/*.py"),
    ]
    found = {}
    for path in files:
        name = path.relative_to(ROOT).as_posix()
        if not HISTORY.match(name):
            found[name] = path.read_text()
    return found


# A step's key, ao:<task>:<n>, written anywhere: the prefix as a literal in any string (SQL's
# 'ao:', Python's "ao:…", f"ao:{…}", 'ao' + …), or the prefix's constant followed by a task and
# a number (f"{KEY_PREFIX}:{task}:{n}", KEY_PREFIX + ":" + …, ":".join((KEY_PREFIX, …)),
# "%s:%s:%s" % (KEY_PREFIX, …), "{}:{}:{}".format(KEY_PREFIX, …)). A key of another kind that
# starts with the prefix (a notification's, f"{KEY_PREFIX}:notify:…") and a test of whether a
# reference is ours (f"{KEY_PREFIX}:") are not a step's key.
KEY_FORMAT = (
    r"['\x22]ao:"
    r"|['\x22]ao['\x22]\s*(\+|\|\|)"
    r"|\{KEY_PREFIX\}:\{"
    r"|\bKEY_PREFIX\s*\+"
    r"|\(\s*KEY_PREFIX\s*,"
    r"|format\(\s*KEY_PREFIX\b"
)


def _where(pattern: str) -> list[str]:
    rule = re.compile(pattern, re.IGNORECASE | re.DOTALL)
    return sorted(name for name, text in _sources().items() if rule.search(text))


@pytest.mark.parametrize(
    ("what", "pattern", "place"),
    [
        ("an entry is written", r"INSERT INTO journal_entry\b", "journal/sql/journal_entry_add"),
        ("a task is born", r"INSERT INTO journal_task\b", "journal/sql/journal_task_create"),
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
        ("a step's key is formatted", KEY_FORMAT, "journal/sql/journal_step_key"),
        (
            "the keep is turned into a moment",
            r"make_interval\(\s*secs\s*=>\s*[\w.]*keep",
            "journal/sql/journal_retention_before",
        ),
        ("the keys' prefix is named", r"\bKEY_PREFIX\s*=", "journal/keys.py"),
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


@pytest.mark.parametrize(
    "written",
    [
        "key = f\x22ao:{task_id}:{n}\x22",
        "key = 'ao:' + str(task_id) + ':' + str(n)",
        "key = f\x22{KEY_PREFIX}:{task_id}:{n}\x22",
        "key = KEY_PREFIX + ':' + step_id(task_id, n)",
        "key = ':'.join((KEY_PREFIX, str(task_id), str(n)))",
        "key = '%s:%s:%s' % (KEY_PREFIX, task_id, n)",
        "key = '{}:{}:{}'.format(KEY_PREFIX, task_id, n)",
        "Q(key__startswith=f\x22ao:{q}:\x22)",
        "OUR_PREFIX = \x22ao:\x22",
        "SELECT 'ao' || p_task || ':' || p_n",
    ],
)
def test_the_key_format_is_seen_however_it_is_written(written: str) -> None:
    assert re.search(KEY_FORMAT, written, re.IGNORECASE | re.DOTALL), written


@pytest.mark.parametrize(
    "written",
    [
        "return f\x22{KEY_PREFIX}:notify:{task_id}:{entry_id}\x22",  # a notification's key
        "return reference.startswith(f\x22{KEY_PREFIX}:\x22)",  # whether a key is ours
        "is_our_key(reference)",
    ],
)
def test_what_is_not_a_step_key_is_not_seen(written: str) -> None:
    assert not re.search(KEY_FORMAT, written, re.IGNORECASE | re.DOTALL), written
