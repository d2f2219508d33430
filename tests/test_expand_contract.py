"""Migrations are written expand-then-contract (devtools/expand_contract.py,
docs/operating/deploys.md): every migration since the rule leaves the running version
working, and each kind of change that would not is refused with a sentence."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import migrations, models
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.state import ProjectState

from devtools import expand_contract
from journal.calls import Argument, Signature


@pytest.fixture(scope="module")
def state() -> ProjectState:
    """The schema as the journal's migrations leave it."""
    loader = MigrationLoader(None, ignore_no_migrations=True)
    return loader.project_state()


def judged(state: ProjectState, *operations: Any, **says: str) -> list[str]:
    migration = type("Migration", (migrations.Migration,), says)("0099_probe", "journal")
    migration.operations = list(operations)
    return expand_contract.migration_problems(migration, state, "journal")


def test_every_migration_since_the_rule_leaves_the_running_version_working() -> None:
    assert expand_contract.findings() == []


def test_columns_are_added_nullable_or_with_a_database_default(state: ProjectState) -> None:
    plain = migrations.AddField("task", "region", models.CharField(max_length=20, default="eu"))
    (problem,) = judged(state, plain)
    assert "adds task.region NOT NULL without a database default" in problem
    assert (
        judged(
            state, migrations.AddField("task", "region", models.CharField(max_length=20, null=True))
        )
        == []
    )
    assert (
        judged(
            state,
            migrations.AddField("task", "region", models.CharField(max_length=20, db_default="eu")),
        )
        == []
    )


def test_what_the_running_version_uses_is_removed_only_by_a_contract(state: ProjectState) -> None:
    removed = migrations.RemoveField("task", "goal")
    (problem,) = judged(state, removed)
    assert "removes a column the running version still reads and writes" in problem
    assert "renames a column" in judged(state, migrations.RenameField("task", "goal", "aim"))[0]
    assert judged(state, removed, contract="after 2.0: no process reads goal since 1.9") == []


def test_a_column_changed_under_the_running_version_is_refused(state: ProjectState) -> None:
    field = state.models["journal", "task"].fields["lease_owner"]  # varchar(200), NOT NULL
    wider = migrations.AlterField("task", "lease_owner", models.CharField(max_length=400))
    assert judged(state, wider) == []
    narrower = migrations.AlterField("task", "lease_owner", models.CharField(max_length=20))
    assert "from varchar(200) to varchar(20)" in judged(state, narrower)[0]
    assert field.null is False
    made_null = migrations.AlterField(
        "task", "wake_at", models.DateTimeField(null=False, default=None)
    )
    assert "makes task.wake_at NOT NULL" in judged(state, made_null)[0]


def test_sql_of_its_own_says_why_it_is_compatible_and_never_drops(state: ProjectState) -> None:
    sql = migrations.RunSQL("CREATE INDEX CONCURRENTLY x ON journal_task (kind)")
    assert "cannot be judged" in judged(state, sql)[0]
    assert judged(state, sql, compatible="an index: nothing the running version does changes") == []
    dropped = migrations.RunSQL("DROP FUNCTION journal_task_wake(uuid)")
    assert "only a contract migration may" in judged(state, dropped, compatible="it is not used")[0]


def signature(*arguments: tuple[str, str, bool], returns: str = "bigint") -> Signature:
    return Signature(
        "journal_probe", tuple(Argument(n, t, required=r) for n, t, r in arguments), (), returns
    )


def test_a_journal_function_keeps_what_the_running_version_passes_and_reads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    versions = {
        1: signature(("task", "uuid", True), ("reason", "text", False)),
        2: signature(("task", "uuid", True), ("reason", "text", False), ("by", "text", False)),
        3: signature(("task", "uuid", True), ("by", "text", True)),
        4: signature(("task", "text", True), ("by", "text", True), returns="integer"),
    }

    class File:
        def __init__(self, version: int) -> None:
            self.text = str(version)

    monkeypatch.setattr("journal.sqlfiles.sql_file", lambda name, version: File(version))
    monkeypatch.setattr("journal.calls.parse", lambda text: versions[int(text)])
    assert expand_contract.function_problems("journal_probe", 2) == []
    third = expand_contract.function_problems("journal_probe", 3)
    assert any("no longer takes p_reason" in p for p in third)
    fourth = expand_contract.function_problems("journal_probe", 4)
    assert any("takes p_task as text, not uuid" in p for p in fourth)
    assert any("returns other columns" in p for p in fourth)
    versions[3] = signature(("task", "uuid", True), ("reason", "text", False), ("x", "int", True))
    assert any("requires p_x" in p for p in expand_contract.function_problems("journal_probe", 3))


def test_the_migration_before_the_rule_would_have_been_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """0024 dropped two functions whose results changed: a version still running would not
    have survived it, and the rule says so."""
    monkeypatch.setitem(expand_contract.CHECKED_AFTER, "journal", "0023_person_decisions")
    found = [f for f in expand_contract.findings() if f.startswith("journal.")]
    assert [f.split(": ", 1)[0] for f in found] == ["journal.0024_what_moves_return"] * 3
    assert "its SQL drops, renames or alters something the running version may use" in found[0]
    assert "journal_lease_release 002 returns other columns than 001" in found[1]
    assert "journal_mark_unknown 002 returns other columns than 001" in found[2]
