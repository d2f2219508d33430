"""JSON Schema as agentops uses it: strict integers, formats checked, sentences for people."""

from __future__ import annotations

import numbers
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from jsonschema import Draft202012Validator, validators

# Text that reaches a provider's headers (a subject, a name) or a ledger: no control
# character (C0, DEL, C1 — NEL, U+0085, among them) and no Unicode line or paragraph
# separator, so nothing can smuggle a header line or hide in a log. A search for one
# anywhere, negated: an anchored pattern would let a trailing newline through ($ matches
# before it).
NO_CONTROL: dict[str, Any] = {
    "not": {"type": "string", "pattern": "[\\x00-\\x1f\\x7f-\\x9f\\u2028\\u2029]"}
}


def _integer(value: Any) -> bool:
    """JSON Schema calls 49.0 an integer; for money it is not. "integer" here means an int."""
    return isinstance(value, int) and not isinstance(value, bool)


StrictValidator = validators.extend(  # type: ignore[no-untyped-call]
    Draft202012Validator,
    type_checker=Draft202012Validator.TYPE_CHECKER.redefine(
        "integer", lambda _checker, value: _integer(value)
    ),
)

FORMATS = Draft202012Validator.FORMAT_CHECKER

Check = Callable[[Any], bool]


# A validator per schema, made the first time the schema is used (a tool's and a kind's
# schemas are declared once, at import): kept with the schema itself, so that an id reused
# by another object after this one is gone can never find it. Beside it, the schema compiled
# to a plain function (:func:`compiled`), when it can be.
_validators: dict[int, tuple[Mapping[str, Any], Any, Check | None]] = {}


def schema_validator(schema: Mapping[str, Any]) -> tuple[Any, Check | None]:
    """``schema``'s StrictValidator, and the schema compiled (:func:`compiled`) when it can be:
    made once per schema."""
    found = _validators.get(id(schema))
    if found is None or found[0] is not schema:
        if len(_validators) > 10_000:  # schemas made on the fly: never a growing cache
            _validators.clear()
        found = _validators[id(schema)] = (
            schema,
            StrictValidator(dict(schema), format_checker=FORMATS),
            compiled(schema),
        )
    return found[1], found[2]


def schema_problems(schema: Mapping[str, Any], value: Any, *, prefix: str = "") -> list[str]:
    """What is wrong with ``value`` under ``schema``, each a sentence naming where.

    A value the compiled schema accepts has nothing wrong with it: the common case costs a
    few plain comparisons. Anything else is judged by ``StrictValidator`` itself, which also
    says what is wrong."""
    validator, quick = schema_validator(schema)
    if quick is not None and quick(value):
        return []
    problems = []
    for error in sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path)):
        path = ".".join(str(p) for p in error.absolute_path)
        message = (
            "must not contain control characters (line breaks, tabs, ...)"
            if error.validator == "not" and error.absolute_path
            else error.message
        )
        where = f"{prefix}.{path}" if prefix and path else (path or prefix or "arguments")
        problems.append(f"{where}: {message}")
    return problems


# --- the schema compiled ---------------------------------------------------------------------
#
# A schema written with the keywords below becomes one function that answers "valid?" as
# StrictValidator would (tests/agentops/test_schema.py holds them to that, value by value).
# A schema using any other keyword ($ref, anyOf, patternProperties, ...) is not compiled, and
# StrictValidator judges every value. Each keyword applies, as JSON Schema says, only to the
# values of its type: "maxLength" says nothing of a number.

_TYPES: dict[str, Check] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": _integer,
    "number": lambda v: isinstance(v, numbers.Number) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}
_ANNOTATIONS = frozenset(
    {"$schema", "$id", "$comment", "title", "description", "default", "examples", "deprecated"}
)
_KEYWORDS = _ANNOTATIONS | {
    "type",
    "enum",
    "const",
    "properties",
    "required",
    "additionalProperties",
    "pattern",
    "minLength",
    "maxLength",
    "format",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "items",
    "minItems",
    "maxItems",
    "not",
}


class _Unsupported(Exception):
    """A keyword, or a keyword's value, the compiler does not take: StrictValidator judges."""


def compiled(schema: Any) -> Check | None:
    """``schema`` as one function answering whether a value is valid, or None if it uses
    anything :data:`_KEYWORDS` does not name (or names it in a form JSON Schema does not)."""
    try:
        return _compile(schema)
    except (_Unsupported, re.error, TypeError, ValueError):
        return None


def _equal(one: Any, two: Any) -> bool:
    """JSON's equality, as StrictValidator's enum and const judge it: true is not 1, 1 is 1.0,
    containers compared member by member."""
    if one is two:
        return True
    if isinstance(one, str) or isinstance(two, str):
        return bool(one == two)
    if isinstance(one, Sequence) and isinstance(two, Sequence):
        return len(one) == len(two) and all(_equal(a, b) for a, b in zip(one, two, strict=True))
    if isinstance(one, Mapping) and isinstance(two, Mapping):
        return one.keys() == two.keys() and all(_equal(one[k], two[k]) for k in one)
    if isinstance(one, bool) or isinstance(two, bool):
        return one is two
    return bool(one == two)


def _number(value: Any) -> Any:
    if isinstance(value, bool) or not _TYPES["number"](value):
        raise _Unsupported(value)
    return value


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _Unsupported(value)
    return value


def _compile(schema: Any) -> Check:
    if schema is True:
        return lambda v: True
    if schema is False:
        return lambda v: False
    if not isinstance(schema, Mapping) or not set(schema) <= _KEYWORDS:
        raise _Unsupported(schema)
    checks: list[Check] = []
    is_object, is_array, is_string = _TYPES["object"], _TYPES["array"], _TYPES["string"]
    is_number = _TYPES["number"]

    if "type" in schema:
        named = schema["type"]
        names = [named] if isinstance(named, str) else named
        if not isinstance(names, list) or not names or any(n not in _TYPES for n in names):
            raise _Unsupported(named)
        kinds = [_TYPES[n] for n in names]
        checks.append(lambda v: any(kind(v) for kind in kinds))
    if "enum" in schema:
        members = schema["enum"]
        if not isinstance(members, list):
            raise _Unsupported(members)
        checks.append(lambda v: any(_equal(v, m) for m in members))
    if "const" in schema:
        const = schema["const"]
        checks.append(lambda v: _equal(v, const))

    # Strings
    if "pattern" in schema:
        search = re.compile(schema["pattern"]).search
        checks.append(lambda v: not is_string(v) or search(v) is not None)
    if "minLength" in schema:
        least = _count(schema["minLength"])
        checks.append(lambda v: not is_string(v) or len(v) >= least)
    if "maxLength" in schema:
        most = _count(schema["maxLength"])
        checks.append(lambda v: not is_string(v) or len(v) <= most)
    if "format" in schema:
        name = schema["format"]
        if not isinstance(name, str):
            raise _Unsupported(name)
        checks.append(lambda v: FORMATS.conforms(v, name))

    # Numbers
    if "minimum" in schema:
        low = _number(schema["minimum"])
        checks.append(lambda v: not is_number(v) or not v < low)
    if "maximum" in schema:
        high = _number(schema["maximum"])
        checks.append(lambda v: not is_number(v) or not v > high)
    if "exclusiveMinimum" in schema:
        above = _number(schema["exclusiveMinimum"])
        checks.append(lambda v: not is_number(v) or not v <= above)
    if "exclusiveMaximum" in schema:
        below = _number(schema["exclusiveMaximum"])
        checks.append(lambda v: not is_number(v) or not v >= below)

    # Objects
    if "required" in schema:
        required = schema["required"]
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            raise _Unsupported(required)
        checks.append(lambda v: not is_object(v) or all(r in v for r in required))
    properties = schema.get("properties", {})
    if not isinstance(properties, Mapping):
        raise _Unsupported(properties)
    if properties:
        each = [(name, _compile(sub)) for name, sub in properties.items()]

        def known(v: Any) -> bool:
            if isinstance(v, dict):
                for name, check in each:
                    if name in v and not check(v[name]):
                        return False
            return True

        checks.append(known)
    if "additionalProperties" in schema:
        extra = _compile(schema["additionalProperties"])

        def unknown(v: Any) -> bool:
            if isinstance(v, dict):
                for name in v:
                    if name not in properties and not extra(v[name]):
                        return False
            return True

        checks.append(unknown)

    # Arrays
    if "items" in schema:
        item = _compile(schema["items"])
        checks.append(lambda v: not is_array(v) or all(item(i) for i in v))
    if "minItems" in schema:
        fewest = _count(schema["minItems"])
        checks.append(lambda v: not is_array(v) or len(v) >= fewest)
    if "maxItems" in schema:
        most_items = _count(schema["maxItems"])
        checks.append(lambda v: not is_array(v) or len(v) <= most_items)

    if "not" in schema:
        negated = _compile(schema["not"])
        checks.append(lambda v: not negated(v))

    if not checks:
        return lambda v: True
    if len(checks) == 1:
        return checks[0]

    def every(v: Any) -> bool:
        for check in checks:  # noqa: SIM110 - a loop makes no generator per value
            if not check(v):
                return False
        return True

    return every
