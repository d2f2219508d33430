"""The journal's SQL is its files (journal/sql): what PostgreSQL holds is exactly their newest
version, every newest version is loaded by a migration, and nothing else is there."""

from __future__ import annotations

import hashlib
import re
import uuid
from pathlib import Path
from typing import Any

import pytest
from django.db import connection, transaction

from journal.keys import KEY_PREFIX, is_our_key
from journal.sqlfiles import sql_files, sql_newest
from tests.databases import owner_connection
from tests.journal.support import step_key

pytestmark = pytest.mark.usefixtures("committed")

ROOT = Path(__file__).resolve().parents[2]
SEARCH_PATH = "search_path=pg_catalog, public, pg_temp"
TABLES = ("journal_task", "journal_step", "journal_entry", "journal_approval")


def _function(text: str) -> tuple[str, str]:
    """A file's function: its name, and its CREATE statement (signature, attributes, body)."""
    match = re.search(r"CREATE OR REPLACE FUNCTION (\w+)\(.*?\bAS \$\$.*?\$\$;", text, re.DOTALL)
    assert match is not None, "a file defines one function, AS $$ … $$;"
    return match[1], match[0]


# What PostgreSQL keeps of a function, each as it prints it: pg_get_functiondef's parts.
DEFINITION = """
    SELECT p.proname,
           pg_get_function_arguments(p.oid),
           pg_get_function_result(p.oid),
           l.lanname,
           p.provolatile,
           p.prosecdef,
           p.proisstrict,
           coalesce(p.proconfig, '{}'),
           p.prosrc,
           regexp_replace(pg_get_functiondef(p.oid), '^(CREATE OR REPLACE FUNCTION )[^.(]+\\.',
                          '\\1')
      FROM pg_proc p
      JOIN pg_namespace n ON n.oid = p.pronamespace
      JOIN pg_language l ON l.oid = p.prolang
     WHERE n.nspname = coalesce(%s, current_schema()) AND p.proname LIKE 'journal\\_%%'
"""
PARTS = (
    "arguments and their defaults",
    "return type",
    "language",
    "volatility",
    "security definer",
    "strictness",
    "settings (the search path)",
    "body",
    "definition",
)


def _held(cursor: Any, schema: str | None = None) -> dict[str, tuple[Any, ...]]:
    """The journal's functions in `schema` (the current one), one signature each."""
    cursor.execute(DEFINITION, [schema])
    rows = cursor.fetchall()
    names = [row[0] for row in rows]
    overloads = sorted({name for name in names if names.count(name) > 1})
    assert overloads == [], f"more than one signature in PostgreSQL: {overloads}"
    return {row[0]: tuple(row[1:]) for row in rows}


def _as_files_define(statements: dict[str, str]) -> dict[str, tuple[Any, ...]]:
    """Each file's function as PostgreSQL keeps it: created by the owner in a schema of its
    own, in a transaction that is rolled back, and read back the same way as the live ones."""
    scratch = "journal_sql_files_check"
    owner = owner_connection()
    found: dict[str, tuple[Any, ...]] = {}
    try:
        with transaction.atomic(using=owner.alias), owner.cursor() as cursor:
            cursor.execute(f"CREATE SCHEMA {scratch}")
            cursor.execute(f"SET LOCAL search_path = {scratch}, public")
            for statement in statements.values():
                cursor.execute(statement, params=None)
            found = _held(cursor, scratch)
            raise _RollBack
    except _RollBack:
        pass
    return found


class _RollBack(Exception):
    pass


def test_every_function_in_postgresql_is_its_file() -> None:
    """Not only the body: the arguments, their defaults, the return type, the language,
    volatility, SECURITY DEFINER and the settings (search path) are compared with the
    file's, so a function whose signature changed without a new version (or whose old
    signature is left beside the new one) fails here."""
    statements = {}
    for file in sql_newest().values():
        name, statement = _function(file.text)
        assert name == file.name, f"{file.path.name} defines {name}"
        statements[name] = statement
    with connection.cursor() as cursor:
        held = _held(cursor)
    files = _as_files_define(statements)
    assert set(held) == set(files) == set(statements), "functions in PostgreSQL and files differ"
    for name, expected in files.items():
        for part, have, want in zip(PARTS, held[name], expected, strict=True):
            assert have == want, f"{name}: its {part} in PostgreSQL is not its file's"
        config = held[name][PARTS.index("settings (the search path)")]
        assert SEARCH_PATH in config, f"{name}: its search path is not pinned"


def test_the_comparison_sees_a_changed_signature() -> None:
    """The check above, shown failing: a default changed, an argument's type, the
    volatility, SECURITY DEFINER and the result each make the file differ from PostgreSQL."""
    file = sql_newest()["journal_hold"]
    _, statement = _function(file.text)
    with connection.cursor() as cursor:
        held = _held(cursor)["journal_hold"]
    changes = {
        "arguments and their defaults": ("p_steps integer DEFAULT 0", "p_steps integer DEFAULT 1"),
        "return type": ("held_version bigint,", "held_version integer,"),
        "volatility": ("LANGUAGE plpgsql\n", "LANGUAGE plpgsql STABLE\n"),
        "security definer": ("LANGUAGE plpgsql\n", "LANGUAGE plpgsql SECURITY DEFINER\n"),
        "settings (the search path)": ("pg_catalog, public, pg_temp", "public, pg_catalog"),
    }
    for part, (old, new) in changes.items():
        assert old in statement, part
        changed = _as_files_define({"journal_hold": statement.replace(old, new, 1)})
        index = PARTS.index(part)
        assert changed["journal_hold"][index] != held[index], part
        assert changed["journal_hold"][-1] != held[-1], part
    same = _as_files_define({"journal_hold": statement})
    assert same["journal_hold"] == held


def _triggers(text: str) -> dict[str, str]:
    """A file's CREATE TRIGGER statements by name, in one normal spacing."""
    found = re.findall(r"(CREATE (?:CONSTRAINT )?TRIGGER (\w+).*?);", text, re.DOTALL)
    return {name: " ".join(statement.split()) for statement, name in found}


def test_every_trigger_on_the_journal_is_its_file() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT t.tgname, pg_get_triggerdef(t.oid)
              FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
             WHERE c.relname = ANY(%s) AND NOT t.tgisinternal
            """,
            [list(TABLES)],
        )
        held = {name: definition.replace("public.", "") for name, definition in cursor.fetchall()}
    declared: dict[str, str] = {}
    for file in sql_newest().values():
        declared.update(_triggers(file.text))
    assert set(held) == set(declared), "triggers in PostgreSQL and files differ"
    for name, definition in declared.items():
        assert held[name] == definition, f"{name}: {held[name]!r} is not its file's"


def test_every_newest_file_is_loaded_by_a_migration() -> None:
    migrations = "\n".join(
        path.read_text() for path in sorted((ROOT / "journal" / "migrations").glob("0*.py"))
    )
    for file in sql_newest().values():
        assert f'("{file.name}", {file.version})' in migrations, f"{file.path.name} is not loaded"
    assert sql_files(), "no SQL files found"


def test_a_file_once_written_never_changes() -> None:
    """A migration loaded it as it was: a change is a new version (and a migration), so a
    database migrated before the change and one migrated after hold the same text. The
    sums are in journal/sql/SHA256SUMS; add a new version's line when you write it."""
    sums = {}
    for line in (ROOT / "journal" / "sql" / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split()
        sums[name] = digest
    for file in sql_files():
        actual = hashlib.sha256(file.path.read_bytes()).hexdigest()
        assert sums.get(file.path.name) == actual, (
            f"{file.path.name} changed or is not in SHA256SUMS: write "
            f"{file.name}.{file.version + 1:03d}.sql and a migration that loads it instead"
        )


def test_the_keys_prefix_is_the_one_the_key_format_writes() -> None:
    """A step's key is formatted only by journal_step_key; Python names only its prefix
    (journal.keys.KEY_PREFIX, for a compensation's and a notification's keys and to tell our
    keys in a provider's records). The two agree."""
    task = uuid.uuid4()
    key = step_key(task, 3)
    assert key == f"{KEY_PREFIX}:{task}:3"
    assert is_our_key(key) and not is_our_key(f"x{key}")
