"""Each app's migrations touch only its own tables (issue 16): journal's the journal's,
agentops' agentops', and so on, so that no app's schema or rules are made or changed from
another's history. Read from the migrations as written, without a database: the tables an
operation names (a model's table, every table named in its SQL — RunSQL, the journal's SQL
files its loader runs, the SQL and models a RunPython function names) must be its app's.
A RunPython of the harness's apps may also reach the framework's auth and contenttypes
through the ORM: the operators' groups and permissions are data there, as Django keeps them.
The journal, the core, knows no people: its migrations may not (its 0006 once made the
operators' groups)."""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.apps import apps
from django.db import migrations
from django.db.migrations.loader import MigrationLoader

from journal.sqlfiles import sql_file

PRODUCT = ("journal", "agentops", "commerce", "sandbox")
FRAMEWORK = {"auth", "contenttypes"}


def _ours() -> dict[str, str]:
    """Our apps, by label: the label each table of theirs is owned by."""
    return {c.label: c.name for c in apps.get_app_configs() if c.name.split(".")[0] in PRODUCT}


def _tables() -> dict[str, str]:
    """Every table of every installed app (models, history included), and whose it is."""
    owned = {
        m._meta.db_table: m._meta.app_label for m in apps.get_models(include_auto_created=True)
    }
    loader = MigrationLoader(None, ignore_no_migrations=True)
    for (label, _), migration in loader.disk_migrations.items():
        for operation in migration.operations:
            if isinstance(operation, migrations.CreateModel):
                table = operation.options.get("db_table") or f"{label}_{operation.name.lower()}"
                owned.setdefault(table, label)
    return owned


def _sql(operation: Any) -> Iterator[str]:
    """The SQL an operation runs or names, as text."""
    if isinstance(operation, migrations.RunSQL):
        for statement in (
            operation.sql if isinstance(operation.sql, list | tuple) else [operation.sql]
        ):
            yield statement if isinstance(statement, str) else statement[0]
    elif isinstance(operation, migrations.RunPython):
        code: Any = operation.code  # a function: its closure tells the loader's files
        cells = dict(
            zip(
                code.__code__.co_freevars,
                (c.cell_contents for c in code.__closure__ or ()),
                strict=True,
            )
        )
        if code.__qualname__ == "loader.<locals>.load":  # journal.sqlfiles.loader
            for name, version in cells["files"]:
                yield sql_file(name, version).text
        else:
            yield inspect.getsource(code)
    elif isinstance(operation, migrations.SeparateDatabaseAndState):
        for inner in operation.database_operations:
            yield from _sql(inner)


def _touched(label: str, operation: Any, tables: dict[str, str]) -> set[tuple[str, str]]:
    """(table or app, whose) for everything of another app the operation touches."""
    found: set[tuple[str, str]] = set()
    options = getattr(operation, "options", None) or {}
    table = options.get("db_table") or getattr(operation, "table", None)
    if table and tables.get(table, label) != label:
        found.add((table, tables[table]))
    for text in _sql(operation):
        for word in set(re.findall(r"\b[a-z_][a-z0-9_]*\b", text)):
            if word in tables and tables[word] != label:
                found.add((word, tables[word]))
        framework = set() if label == "journal" else FRAMEWORK
        for other in re.findall(r"get_model\(\s*['\x22](\w+)['\x22]", text):
            if other != label and other not in framework:
                found.add((f"{other} models", other))
    return found


def _migrations() -> list[tuple[str, str, Any]]:
    ours = _ours()
    loader = MigrationLoader(None, ignore_no_migrations=True)
    return sorted(
        (label, name, migration)
        for (label, name), migration in loader.disk_migrations.items()
        if label in ours
    )


@pytest.mark.parametrize(
    ("label", "name", "migration"), _migrations(), ids=lambda v: v if isinstance(v, str) else ""
)
def test_each_migration_touches_only_its_apps_tables(label: str, name: str, migration: Any) -> None:
    tables = _tables()
    touched = set()
    for operation in migration.operations:
        touched |= _touched(label, operation, tables)
    assert touched == set(), f"{label}.{name} touches another app's tables: {sorted(touched)}"


def test_the_check_sees_a_migration_reaching_into_another_apps_tables() -> None:
    tables = _tables()
    trigger = migrations.RunSQL(
        "CREATE TRIGGER t BEFORE UPDATE ON journal_step FOR EACH ROW EXECUTE FUNCTION f();"
    )
    assert _touched("agentops", trigger, tables) == {("journal_step", "journal")}
    grants = migrations.RunSQL("UPDATE agentops_apiclient SET scopes = '[]';")
    assert _touched("journal", grants, tables) == {("agentops_apiclient", "agentops")}

    def groups(apps: Any, schema_editor: Any) -> None:
        apps.get_model("journal", "Task").objects.update(goal="x")

    assert _touched("agentops", migrations.RunPython(groups), tables) == {
        ("journal models", "journal")
    }

    def journal_groups(apps: Any, schema_editor: Any) -> None:
        apps.get_model("auth", "Group").objects.get_or_create(name="Operators")

    assert _touched("journal", migrations.RunPython(journal_groups), tables) == {
        ("auth models", "auth")
    }
    assert _touched("agentops", migrations.RunPython(journal_groups), tables) == set()
    own = migrations.RunSQL("ALTER TABLE journal_step SET (fillfactor = 70);")
    assert _touched("journal", own, tables) == set()
    audit = migrations.RunSQL("SELECT 1 FROM agentops_audit_finding;")
    assert _touched("agentops", audit, tables) == {("agentops_audit_finding", "agentops_audit")}
