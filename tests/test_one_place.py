"""Each rule in one place (docs/design.md §4; journal/README.md, "Where each rule lives").

Who may write the journal is PostgreSQL's catalogue's to say: the app's roles write no
journal table and execute only the functions journal/callers.py lists
(tests/agentops/test_database_roles.py reads every privilege back). So "one place" is asked of
what PostgreSQL holds: the functions themselves, read from pg_proc, each rule in exactly one
of them; and of how Python calls them: through journal/calls.py, whose statements are built
from the functions' own signatures, never by a module of its own. What is written in Python
(the key prefix, the key format nowhere else) is read from the product's sources: journal,
agentops, sandbox and commerce; migrations are history, tests and devtools may do as they
like."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.db import connection

from journal.callers import MOVES
from journal.sqlfiles import sql_newest

ROOT = Path(__file__).resolve().parents[1]
HISTORY = re.compile(r"journal/migrations/00\d\d_|agentops/migrations/000[1-3]_")


def _sources() -> dict[str, str]:
    """The product's Python sources, and the newest version of each SQL file."""
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


def _held() -> dict[str, str]:
    """Every function PostgreSQL holds in the journal's schema, its body as it keeps it."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT p.proname, p.prosrc FROM pg_proc p "
            "JOIN pg_namespace n ON n.oid = p.pronamespace "
            "WHERE n.nspname = current_schema() AND p.proname LIKE 'journal\\_%%'"
        )
        return {str(name): str(body) for name, body in cursor.fetchall()}


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


@pytest.mark.usefixtures("committed")
@pytest.mark.parametrize(
    ("what", "pattern", "places"),
    [
        ("an entry is written", r"INSERT INTO journal_entry\b", ["journal_entry_add"]),
        ("a task is born", r"INSERT INTO journal_task\b", ["journal_task_create"]),
        (
            "a task's status changes",
            r"UPDATE journal_task\b[^;]*?\bSET\b(?:(?:(?!\bWHERE\b)[^;])*,)?\s*status\s*=",
            ["journal_transition"],
        ),
        ("a step settles", r"UPDATE journal_step\b[^;]*\bsettled_at\s*=", ["journal_step_settle"]),
        (
            "the lease is checked and extended",
            r"lease_expires_at\s*=\s*now\(\)[^;]*\bWHERE\b[^;]*lease_token\s*=\s*p_token",
            ["journal_hold"],
        ),
        ("a lease is given back", r"SET lease_expires_at = NULL", ["journal_lease_release"]),
        ("a step's key is formatted", r"'ao:'", ["journal_step_key"]),
        ("the state machine is asked", r"FROM journal_status_move\b", ["journal_transition"]),
        # By the recorded call it approved, or by the one the guards refused in its stead.
        (
            "an approval is used",
            r"SET state = 'used'",
            ["journal_approval_spend", "journal_record"],
        ),
        (
            "the keep is turned into a moment",
            r"make_interval\(\s*secs\s*=>\s*[\w.]*keep",
            ["journal_retention_before"],
        ),
    ],
)
def test_each_rule_is_in_one_function_postgresql_holds(
    what: str, pattern: str, places: list[str]
) -> None:
    rule = re.compile(pattern, re.IGNORECASE | re.DOTALL)
    assert sorted(name for name, body in _held().items() if rule.search(body)) == places, what


def test_the_keys_prefix_is_named_once_and_the_key_format_nowhere_in_python() -> None:
    sources = _sources()
    prefix = [name for name, text in sources.items() if re.search(r"\bKEY_PREFIX\s*=", text)]
    assert prefix == ["journal/keys.py"]
    formatted = re.compile(KEY_FORMAT, re.IGNORECASE | re.DOTALL)
    where = sorted(name for name, text in sources.items() if formatted.search(text))
    assert where == ["journal/sql/journal_step_key.001.sql"]


def test_python_makes_the_journals_moves_only_through_its_bindings() -> None:
    """A move of the journal (a function an app role may execute that writes) is named in
    Python only as a name handed to journal.calls, which builds the statement from the
    function's own file: no module spells a call of its own."""
    reads = {
        "journal_partition_expired",
        "journal_partition_dropped",
        "journal_retention_before",
        "journal_uuid_at",
        "journal_step_key",
    }
    spelled = []
    for name, text in _sources().items():
        if not name.endswith(".py") or name == "journal/calls.py":
            continue
        for move in set(MOVES) - reads:
            if re.search(rf"\b{move}\s*\(", text):
                spelled.append(f"{name}: {move}(")
    assert spelled == []


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
