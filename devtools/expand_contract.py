"""Migrations are written expand-then-contract (docs/operating/deploys.md): a migration that a
deploy applies while the previous version still runs must leave that version working.

``python -m devtools.expand_contract`` (and tests/test_expand_contract.py, in ``make test``)
judges every migration written after :data:`CHECKED_AFTER`, operation by operation, against the
schema before it:

- an *expand* (a new table, a nullable column or one with a database default, an index, a
  wider text column, a journal function that still takes every argument the previous version
  passes and returns what it read) passes;
- anything that breaks the running version (a column or table removed or renamed, a column
  made NOT NULL or of another type, a NOT NULL column without a database default, a function
  dropped, an argument removed or made required, a result changed) is refused with a sentence,
  unless the migration says it is a *contract* — ``contract = "..."`` on the migration class,
  naming the release after which no process still needs what it removes;
- what cannot be judged (SQL or Python of its own) needs a sentence saying why the running
  version keeps working: ``compatible = "..."``.

Tooling: the product never imports it (pyproject.toml's import contracts).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Iterator
from typing import Any

from django.db import connections, migrations, models
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.state import ProjectState

CHECKED_AFTER = {"agentops": "0010_task_claims_and_notes", "journal": "0024_what_moves_return"}
"""The last migration of each app written before the rule: those are not judged again (0024
dropped two functions whose results changed, which a running version would not survive)."""

_DROPS = re.compile(r"\b(DROP|RENAME|ALTER\s+TABLE\s+\S+\s+ALTER\s+COLUMN)\b", re.IGNORECASE)
_ALWAYS_COMPATIBLE = (
    migrations.CreateModel,
    migrations.AddIndex,
    migrations.RemoveIndex,
    migrations.RemoveConstraint,
    migrations.AlterModelOptions,
    migrations.AlterModelManagers,
)
_BREAKING = {
    migrations.RemoveField: "removes a column the running version still reads and writes",
    migrations.DeleteModel: "drops a table the running version still reads and writes",
    migrations.RenameField: "renames a column the running version still names",
    migrations.RenameModel: "renames a table the running version still names",
    migrations.AlterModelTable: "renames a table the running version still names",
}


def _db_type(field: models.Field[Any, Any]) -> str | None:
    return field.db_type(connections["default"])


def _widened(old: str | None, new: str | None) -> bool:
    """``new`` is ``old``'s type, or the same text type with room for at least as much."""
    if old == new:
        return True
    found = [re.fullmatch(r"varchar\((\d+)\)", t or "") for t in (old, new)]
    if found[0] and new == "text":
        return True
    return bool(found[0] and found[1] and int(found[1][1]) >= int(found[0][1]))


def field_problem(
    operation: migrations.AddField | migrations.AlterField, state: ProjectState, app: str
) -> str | None:
    """Why adding or changing this field breaks the running version, or None."""
    field = operation.field
    where = f"{operation.model_name}.{operation.name}"
    if field.many_to_many:
        return None
    if isinstance(operation, migrations.AddField):
        if field.null or field.db_default is not models.NOT_PROVIDED:
            return None
        return (
            f"adds {where} NOT NULL without a database default: the running version's inserts "
            "do not name it and would fail. Add it nullable or with db_default, and make it "
            "NOT NULL in a contract migration once no process of that version is left"
        )
    old = state.models[app, operation.model_name_lower].fields[operation.name]
    if old.null and not field.null:
        return (
            f"makes {where} NOT NULL: the running version may still write it empty. Do it in "
            "a contract migration once no process of that version is left"
        )
    if not _widened(_db_type(old), _db_type(field)):
        return (
            f"changes {where} from {_db_type(old)} to {_db_type(field)}: the running version "
            "reads and writes the old type. Add a new column instead, and drop the old one in "
            "a contract migration"
        )
    return None


def function_problems(name: str, version: int) -> list[str]:
    """Why version ``version`` of the journal's function ``name`` breaks a running version that
    calls version ``version - 1`` (by named arguments, reading the result its own file
    declares), or nothing when it does not (or when it is a trigger's, which no code calls)."""
    from journal.calls import parse
    from journal.sqlfiles import sql_file

    if version <= 1:
        return []
    try:
        old, new = (parse(sql_file(name, v).text) for v in (version - 1, version))
    except ValueError:
        return [f"{name} {version:03d} is not one function's file: its change cannot be judged"]
    if new.returns == "trigger":
        return []
    problems = []
    given = {a.name: a for a in new.arguments}
    for argument in old.arguments:
        now = given.get(argument.name)
        if now is None:
            problems.append(
                f"{name} {version:03d} no longer takes p_{argument.name}, which the running "
                "version passes"
            )
        elif now.type != argument.type:
            problems.append(
                f"{name} {version:03d} takes p_{argument.name} as {now.type}, not "
                f"{argument.type} as the running version passes it"
            )
    before = {a.name for a in old.arguments}
    for argument in new.arguments:
        if argument.name not in before and argument.required:
            problems.append(
                f"{name} {version:03d} requires p_{argument.name}, which the running version "
                "does not pass: give it a DEFAULT"
            )
    if (old.returns, old.columns) != (new.returns, new.columns):
        problems.append(
            f"{name} {version:03d} returns other columns than {version - 1:03d}, which the "
            "running version reads by its own file's columns: add a function of another name"
        )
    return problems


def _journal_files(operation: migrations.RunPython) -> tuple[tuple[str, int], ...] | None:
    """The (name, version) files a journal ``loader`` operation runs; None for other Python."""
    code: Any = operation.code
    if getattr(code, "__qualname__", "") != "loader.<locals>.load":
        return None
    closure = getattr(code, "__closure__", None)
    if getattr(code, "__module__", "") != "journal.sqlfiles" or not closure:
        return None
    files: tuple[tuple[str, int], ...] = closure[0].cell_contents
    return files


def _operations(
    operations: Iterable[migrations.operations.base.Operation],
) -> Iterator[migrations.operations.base.Operation]:
    for operation in operations:
        if isinstance(operation, migrations.SeparateDatabaseAndState):
            yield from operation.database_operations
        else:
            yield operation


def migration_problems(migration: migrations.Migration, state: ProjectState, app: str) -> list[str]:
    """Why ``migration`` (applied to ``state``) breaks the version running before it; nothing
    when it says it is a contract (``contract``)."""
    if str(getattr(migration, "contract", "")).strip():
        return []
    compatible = str(getattr(migration, "compatible", "")).strip()
    problems: list[str] = []
    state = state.clone()
    for operation in _operations(migration.operations):
        if isinstance(operation, _ALWAYS_COMPATIBLE):
            pass
        elif type(operation) in _BREAKING:
            problems.append(f"{operation.describe()}: {_BREAKING[type(operation)]}")
        elif isinstance(operation, migrations.AddField | migrations.AlterField):
            problem = field_problem(operation, state, app)
            if problem:
                problems.append(problem)
        elif isinstance(operation, migrations.RunPython) and _journal_files(operation):
            for name, version in _journal_files(operation) or ():
                problems += function_problems(name, version)
        elif isinstance(operation, migrations.RunSQL):
            sql = operation.sql if isinstance(operation.sql, str) else str(operation.sql)
            if _DROPS.search(sql):
                problems.append(
                    "its SQL drops, renames or alters something the running version may use: "
                    "only a contract migration may"
                )
            elif not compatible:
                problems.append(
                    "its SQL cannot be judged: say why the running version keeps working "
                    "(compatible = '...')"
                )
        elif not compatible:
            problems.append(
                f"{operation.describe()} cannot be judged: say why the running version keeps "
                "working (compatible = '...')"
            )
        operation.state_forwards(app, state)
    return problems


def findings(loader: MigrationLoader | None = None) -> list[str]:
    """Every problem of every migration written after :data:`CHECKED_AFTER`, each a sentence
    naming its migration."""
    loader = loader or MigrationLoader(None, ignore_no_migrations=True)
    found = []
    for app, after in CHECKED_AFTER.items():
        plan = loader.graph.forwards_plan((app, loader.graph.leaf_nodes(app)[0][1]))
        mine = [node for node in plan if node[0] == app]
        for node in mine[mine.index((app, after)) + 1 :]:
            state = loader.project_state(node, at_end=False)
            for problem in migration_problems(loader.graph.nodes[node], state, app):
                found.append(f"{app}.{node[1]}: {problem}")
    return found


def main() -> int:
    import django

    django.setup()
    problems = findings()
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
