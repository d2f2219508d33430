"""The journal's SQL is its files (journal/sql): what PostgreSQL holds is exactly their newest
version, every newest version is loaded by a migration, and nothing else is there."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest
from django.db import connection

from journal.sqlfiles import sql_files, sql_newest

pytestmark = pytest.mark.usefixtures("committed")

ROOT = Path(__file__).resolve().parents[2]
SEARCH_PATH = "search_path=pg_catalog, public, pg_temp"
TABLES = ("journal_task", "journal_step", "journal_entry", "journal_approval")


def _function(text: str) -> tuple[str, str]:
    """A file's function: its name, and its body as PostgreSQL keeps it (prosrc)."""
    match = re.search(r"CREATE OR REPLACE FUNCTION (\w+)\(.*?\bAS \$\$(.*?)\$\$;", text, re.DOTALL)
    assert match is not None, "a file defines one function, AS $$ … $$;"
    return match[1], match[2]


def _triggers(text: str) -> dict[str, str]:
    """A file's CREATE TRIGGER statements by name, in one normal spacing."""
    found = re.findall(r"(CREATE TRIGGER (\w+).*?);", text, re.DOTALL)
    return {name: " ".join(statement.split()) for statement, name in found}


def test_every_function_in_postgresql_is_its_file() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT p.proname, p.prosrc, coalesce(p.proconfig, '{}')
              FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
             WHERE n.nspname = current_schema() AND p.proname LIKE 'journal\\_%%'
            """
        )
        held = {name: (source, list(config)) for name, source, config in cursor.fetchall()}
    files = {}
    for file in sql_newest().values():
        name, body = _function(file.text)
        assert name == file.name, f"{file.path.name} defines {name}"
        files[name] = body
    assert set(held) == set(files), "functions in PostgreSQL and files differ"
    for name, body in files.items():
        source, config = held[name]
        assert source == body, f"{name}: PostgreSQL holds another text than its file"
        assert SEARCH_PATH in config, f"{name}: its search path is not pinned"


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
