"""The journal's SQL, kept as files: one per function (with its triggers), by version.

Where a rule lives in SQL (a trigger, a write that is one statement), its text is
``journal/sql/<name>.<version>.sql`` — the function as PostgreSQL should hold it, created or
replaced, and the triggers that call it. Migrations load them by name and version
(:func:`loader`); a changed rule is a new version of its file and a migration that loads
it, so an old migration still loads the text it was written with. A test compares what
PostgreSQL holds with the newest version of every file (``tests/journal/test_sql_files.py``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SQL_DIR = Path(__file__).with_name("sql")
_NAME = re.compile(r"^(?P<name>[a-z_]+)\.(?P<version>\d{3})\.sql$")


@dataclass(frozen=True)
class SqlFile:
    name: str
    version: int
    path: Path

    @property
    def text(self) -> str:
        return self.path.read_text()

    @property
    def retired(self) -> bool:
        """A version that drops its function (and its triggers) rather than defining it: the
        rule moved elsewhere, and PostgreSQL holds nothing by this name any more."""
        return "CREATE OR REPLACE FUNCTION" not in self.text


def sql_files() -> list[SqlFile]:
    """Every version of every file, by name then version."""
    found = []
    for path in sorted(SQL_DIR.glob("*.sql")):
        match = _NAME.match(path.name)
        if match is None:
            raise ValueError(f"{path.name}: SQL files are named <function>.<NNN>.sql")
        found.append(SqlFile(match["name"], int(match["version"]), path))
    return found


def sql_newest() -> dict[str, SqlFile]:
    """The newest version of each file that is not retired: what PostgreSQL should hold now."""
    newest: dict[str, SqlFile] = {}
    for file in sql_files():
        if file.name not in newest or file.version > newest[file.name].version:
            newest[file.name] = file
    return {name: file for name, file in newest.items() if not file.retired}


def sql_file(name: str, version: int) -> SqlFile:
    path = SQL_DIR / f"{name}.{version:03d}.sql"
    if not path.exists():
        raise FileNotFoundError(f"no SQL file {path.name}")
    return SqlFile(name, version, path)


def loader(*files: tuple[str, int]) -> Callable[[Any, Any], None]:
    """A migration operation's function that runs the given files, in order."""

    def load(apps: Any, schema_editor: Any) -> None:
        for name, version in files:
            schema_editor.execute(sql_file(name, version).text, params=None)

    return load
