"""The journal's functions as Python calls them: their signatures read from their files.

Every write to the journal is one of its SQL functions (docs/design.md §4, "The journal's
API is its functions"). Their arguments, defaults and results are written once, in
``journal/sql/<function>.<version>.sql``, which is exactly what PostgreSQL holds
(tests/journal/test_sql_files.py); this module reads them from there when it is first
asked, and builds each call from them: named arguments only (``p_task => %(task)s::uuid``),
each cast to its declared type, the ones not given left to their SQL defaults. Nothing here
names an argument, its type or its default again, and a call that names an argument the
function does not take, or leaves out one it needs, fails before anything is sent.

A call is one statement, prepared on the server (journal/db.py), in the caller's
transaction when there is one; a jsonb argument may be given as a value (written out as
JSON) or as JSON text already. What the function returns comes back as its declared result:
a :class:`Row` for each row of ``RETURNS TABLE`` (jsonb columns decoded), a table's row as a
dict for ``RETURNS SETOF <table>``, or the value itself.

Refusals a function raises for people (SQLSTATE ``AO001``: the move's precondition, as the
sentence to show) and the use of an approval that no longer fits (``AO002``) arrive as
:class:`Refused` and :class:`NotUsable`; any other error as Django raises it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db import DEFAULT_DB_ALIAS, DatabaseError

from journal.db import prepared_cursor
from journal.sqlfiles import sql_newest

REFUSED = "AO001"
NOT_USABLE = "AO002"


class Refused(Exception):
    """A person's move was refused by its function's precondition; the message says why, as
    the sentence to show. Nothing was written."""


class NotUsable(Exception):
    """An approval was not for this call now (used, expired, decided otherwise, another call):
    nothing was written."""


@dataclass(frozen=True)
class Argument:
    name: str  # without its p_ prefix: how Python names it
    type: str
    required: bool


@dataclass(frozen=True)
class Signature:
    """One function as its file declares it."""

    name: str
    arguments: tuple[Argument, ...]
    columns: tuple[tuple[str, str], ...]
    """``RETURNS TABLE``'s columns and their types; empty for any other result."""
    returns: str
    """The declared result: ``TABLE``, ``SETOF <type>``, or a type."""

    def argument(self, name: str) -> Argument:
        for argument in self.arguments:
            if argument.name == name:
                return argument
        known = ", ".join(a.name for a in self.arguments)
        raise TypeError(f"{self.name} takes no argument {name!r} (it takes: {known})")

    @property
    def jsonb(self) -> frozenset[str]:
        """The arguments declared jsonb: a value given for one is written out as JSON."""
        return frozenset(a.name for a in self.arguments if a.type == "jsonb")

    @property
    def jsonb_columns(self) -> tuple[bool, ...]:
        """For each column of ``RETURNS TABLE``, whether it is jsonb (decoded on return)."""
        return tuple(type_ == "jsonb" for _, type_ in self.columns)


class Row(dict[str, Any]):
    """One row a function returned, by column name; also readable as attributes."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


_HEAD = re.compile(
    r"CREATE OR REPLACE FUNCTION (?P<name>\w+)\((?P<args>.*?)\)\s*RETURNS\s+(?P<returns>.*?)\n"
    r"\s*LANGUAGE",
    re.DOTALL,
)


def _split(text: str) -> list[str]:
    """``text`` split at its top-level commas (not inside quotes or brackets)."""
    parts, depth, quoted, start = [], 0, False, 0
    for i, char in enumerate(text):
        if char == "'":
            quoted = not quoted
        elif not quoted and char in "([":
            depth += 1
        elif not quoted and char in ")]":
            depth -= 1
        elif not quoted and depth == 0 and char == ",":
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [part.strip() for part in parts if part.strip()]


def parse(text: str) -> Signature:
    """A function's signature from its file's text."""
    head = _HEAD.search(text)
    if head is None:
        raise ValueError("not a function's file: no CREATE OR REPLACE FUNCTION ... RETURNS")
    arguments = []
    for declared in _split(head["args"]):
        name, _, rest = declared.partition(" ")
        type_, _, default = rest.partition(" DEFAULT ")
        if not name.startswith("p_"):
            raise ValueError(f"{head['name']}: argument {name} is not named p_<name>")
        arguments.append(Argument(name[2:], type_.strip(), required=not default))
    returns = " ".join(head["returns"].split())
    columns: tuple[tuple[str, str], ...] = ()
    if returns.startswith("TABLE"):
        inner = returns[returns.index("(") + 1 : returns.rindex(")")]
        columns = tuple(
            (column.split(" ", 1)[0], column.split(" ", 1)[1].strip()) for column in _split(inner)
        )
        returns = "TABLE"
    return Signature(head["name"], tuple(arguments), columns, returns)


@cache
def signatures() -> dict[str, Signature]:
    """Every function the journal's files define, by name (read once a process)."""
    return {name: parse(file.text) for name, file in sql_newest().items()}


def signature(name: str) -> Signature:
    try:
        return signatures()[name]
    except KeyError:
        raise LookupError(f"the journal has no function {name} (journal/sql)") from None


@cache
def _call_shape(name: str) -> tuple[Signature, frozenset[str], tuple[str, ...], tuple[bool, ...]]:
    """What each call of ``name`` needs of its signature, worked out once: the signature,
    its jsonb arguments, and its table's column names and which of them are jsonb."""
    fn = signature(name)
    return fn, fn.jsonb, tuple(column for column, _ in fn.columns), fn.jsonb_columns


@cache
def _statement(name: str, given: frozenset[str]) -> str:
    """The statement that calls ``name`` with exactly the arguments ``given``: named, each
    cast to its type, in the order the function declares them."""
    fn = signature(name)
    for argument in given:
        fn.argument(argument)  # raises for one it does not take
    missing = [a.name for a in fn.arguments if a.required and a.name not in given]
    if missing:
        raise TypeError(f"{name} needs {', '.join(missing)}")
    passed = ", ".join(
        f"p_{a.name} => %({a.name})s::{a.type}" for a in fn.arguments if a.name in given
    )
    # The names and types are the journal's own files' (never a caller's), and every value
    # is a parameter.
    if fn.returns == "TABLE" or fn.returns.startswith("SETOF"):
        return f"SELECT * FROM {name}({passed})"  # noqa: S608
    return f"SELECT {name}({passed})"  # noqa: S608


def _json(value: Any) -> Any:
    if value is not None and not isinstance(value, str):
        return json.dumps(value, cls=DjangoJSONEncoder)
    return value


def _raised(error: DatabaseError) -> Exception:
    sqlstate = getattr(error.__cause__, "sqlstate", None)
    if sqlstate == REFUSED:
        return Refused(_message(error))
    if sqlstate == NOT_USABLE:
        return NotUsable(_message(error))
    return error


def _message(error: DatabaseError) -> str:
    diag = getattr(error.__cause__, "diag", None)
    primary = getattr(diag, "message_primary", None)
    return str(primary or error)


def _rows(name: str, kwargs: Mapping[str, Any], using: str) -> Iterator[Any]:
    fn, jsonb, columns, decoded = _call_shape(name)
    statement = _statement(name, frozenset(kwargs))
    params = {key: _json(value) if key in jsonb else value for key, value in kwargs.items()}
    names: list[str] = []
    try:
        with prepared_cursor(using) as cursor:
            cursor.execute(statement, params)
            rows = cursor.fetchall()
            # A table's columns are the file's (a row is named without asking the cursor
            # to describe its result: psycopg makes an object a column to say it).
            if fn.returns != "TABLE" and cursor.description:
                names = [c.name for c in cursor.description]
    except DatabaseError as error:
        raised = _raised(error)
        if raised is error:
            raise
        raise raised from error
    if fn.returns == "TABLE":
        for row in rows:
            yield Row(
                (column, json.loads(value) if json_ and isinstance(value, str) else value)
                for column, json_, value in zip(columns, decoded, row, strict=True)
            )
    elif fn.returns.startswith("SETOF") and names and len(names) > 1:
        for row in rows:
            yield dict(zip(names, row, strict=True))
    else:
        for (value,) in rows:
            yield value


def call(name: str, /, *, using: str = DEFAULT_DB_ALIAS, **kwargs: Any) -> Any:
    """Call the journal's function ``name`` with ``kwargs`` (its arguments without their p_
    prefix), on the connection ``using``. Returns its one row (a :class:`Row`, a table's row
    as a dict) or value, or None when it returned no row."""
    return next(_rows(name, kwargs, using), None)


def call_all(name: str, /, *, using: str = DEFAULT_DB_ALIAS, **kwargs: Any) -> list[Any]:
    """Like :func:`call`, every row the function returned (``SETOF``, or a table of rows)."""
    return list(_rows(name, kwargs, using))
