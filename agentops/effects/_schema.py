"""JSON Schema as agentops uses it: strict integers, formats checked, sentences for people."""

from __future__ import annotations

from collections.abc import Mapping
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

# JSON Schema calls 49.0 an integer; for money it is not. "integer" here means an int.
StrictValidator = validators.extend(  # type: ignore[no-untyped-call]
    Draft202012Validator,
    type_checker=Draft202012Validator.TYPE_CHECKER.redefine(
        "integer", lambda _checker, value: isinstance(value, int) and not isinstance(value, bool)
    ),
)

FORMATS = Draft202012Validator.FORMAT_CHECKER


# A validator per schema, made the first time the schema is used (a tool's and a kind's
# schemas are declared once, at import): kept with the schema itself, so that an id reused
# by another object after this one is gone can never find it.
_validators: dict[int, tuple[Mapping[str, Any], Any]] = {}


def _validator(schema: Mapping[str, Any]) -> Any:
    found = _validators.get(id(schema))
    if found is None or found[0] is not schema:
        if len(_validators) > 10_000:  # schemas made on the fly: never a growing cache
            _validators.clear()
        found = _validators[id(schema)] = (
            schema,
            StrictValidator(dict(schema), format_checker=FORMATS),
        )
    return found[1]


def schema_problems(schema: Mapping[str, Any], value: Any, *, prefix: str = "") -> list[str]:
    """What is wrong with ``value`` under ``schema``, each a sentence naming where."""
    validator = _validator(schema)
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
