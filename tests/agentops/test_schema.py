"""A schema compiled to a function (agentops.effects._schema.compiled) accepts exactly what
StrictValidator accepts: value by value, for every schema the installed apps declare (their
tools' arguments, their kinds' references, the bench's kind) and for schemas made up of the
keywords it compiles. A value it accepts is never looked at again, so the one thing it may
never do is accept what StrictValidator refuses."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from agentops.effects import FORMATS, NO_CONTROL, StrictValidator, registry, schema_problems
from agentops.effects._schema import _KEYWORDS, compiled
from devtools.bench.production import BENCH_KIND, PayInvoice


def _strict_valid(schema: Any, value: Any) -> bool:
    return not list(StrictValidator(schema, format_checker=FORMATS).iter_errors(value))


def _declared() -> dict[str, Mapping[str, Any]]:
    found: dict[str, Mapping[str, Any]] = {"NO_CONTROL": NO_CONTROL}
    for name, factory in registry.tools.items():
        found[f"tool {name}"] = factory().schema
    for name, kind in registry.kinds.items():
        found[f"kind {name}"] = kind.refs_schema
    found["tool bench_pay_invoice"] = PayInvoice.schema
    found["kind bench_pay"] = BENCH_KIND.refs_schema
    return found


DECLARED = _declared()

# JSON values, as a decision's arguments are once frozen (json.loads(json.dumps(...))): with
# the values the shipped schemas sit on the edges of (control characters, integers as floats,
# booleans for numbers, invoice-like strings, dates, emails).
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**40), max_value=2**40),
    st.sampled_from([0, 1, -1, 49, 4900, 0.0, 1.0, 49.0, 49.5, -0.5, 10**9, 1e300]),
    st.floats(allow_nan=False),
    st.text(max_size=12),
    st.sampled_from(
        [
            "",
            "INV-2291",
            "INV-a b",
            "inv-2291",
            "x\n",
            "a\x85b",
            "a\u2028b",
            "usd",
            "eur",
            "gbp",
            "USD",
            "ada@example.com",
            "not an email",
            "2026-12-02",
            "2026-13-40",
            "receipt",
            "payment_failed",
            "reminder",
            "pm_card_visa",
            "cus_bench",
            "x" * 300,
        ]
    ),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.text(max_size=8), inner, max_size=4),
    ),
    max_leaves=12,
)


@st.composite
def near(draw: st.DrawFn, schema: Mapping[str, Any]) -> Any:
    """A value close to what ``schema`` asks: its properties present (some of them wrong),
    sometimes one more, sometimes one missing."""
    if schema.get("type") != "object" or not isinstance(schema.get("properties"), Mapping):
        return draw(VALUES)
    value = {}
    for name, sub in schema["properties"].items():
        if draw(st.integers(0, 9)) == 0:
            continue
        value[name] = draw(near(sub) if draw(st.booleans()) else VALUES)
    if draw(st.integers(0, 4)) == 0:
        value[draw(st.text(max_size=6))] = draw(VALUES)
    return value


@pytest.mark.parametrize("name", sorted(DECLARED))
def test_every_declared_schema_compiles(name: str) -> None:
    assert compiled(DECLARED[name]) is not None, f"{name} falls back to StrictValidator"


@pytest.mark.parametrize("name", sorted(DECLARED))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_declared_schema_compiled_accepts_what_strict_validator_accepts(
    name: str, data: st.DataObject
) -> None:
    schema = DECLARED[name]
    value = data.draw(st.one_of(near(schema), VALUES))
    check = compiled(schema)
    assert check is not None
    assert check(value) == _strict_valid(schema, value), value


# Schemas of the compiled keywords, nested: the edges of each keyword, not only those the
# shipped schemas use.
TYPES = st.sampled_from(["object", "array", "string", "integer", "number", "boolean", "null"])
LEAF_SCHEMAS = st.fixed_dictionaries(
    {},
    optional={
        "type": st.one_of(TYPES, st.lists(TYPES, min_size=1, max_size=3, unique=True)),
        "enum": st.lists(SCALARS, min_size=1, max_size=4),
        "const": SCALARS,
        "pattern": st.sampled_from(["^a", "b$", "[0-9]+", "^INV-[0-9]{1,4}$", "\\s"]),
        "minLength": st.integers(0, 5),
        "maxLength": st.integers(0, 5),
        "format": st.sampled_from(["email", "date", "uuid", "ipv4", "no-such-format"]),
        "minimum": st.sampled_from([0, 1, -1.5, 49.0]),
        "maximum": st.sampled_from([0, 100, 49.5]),
        "exclusiveMinimum": st.sampled_from([0, 1.5]),
        "exclusiveMaximum": st.sampled_from([10, 100.0]),
        "minItems": st.integers(0, 3),
        "maxItems": st.integers(0, 3),
        "title": st.just("a title"),
    },
)
SCHEMAS = st.recursive(
    st.one_of(LEAF_SCHEMAS, st.booleans()),
    lambda inner: st.one_of(
        st.fixed_dictionaries(
            {},
            optional={
                "type": st.just("object"),
                "properties": st.dictionaries(st.sampled_from("abcd"), inner, max_size=3),
                "required": st.lists(st.sampled_from("abcde"), max_size=3, unique=True),
                "additionalProperties": inner,
            },
        ),
        st.fixed_dictionaries({"items": inner}, optional={"minItems": st.integers(0, 2)}),
        st.fixed_dictionaries({"not": inner}),
    ),
    max_leaves=6,
)


@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=SCHEMAS, value=VALUES)
@example(schema={"enum": [1]}, value=True)
@example(schema={"enum": [True]}, value=1)
@example(schema={"const": 1.0}, value=1)
@example(schema={"enum": [[1, True]]}, value=[1.0, True])
@example(schema={"type": "integer"}, value=49.0)
@example(schema={"type": "number"}, value=False)
@example(schema={"minimum": 0}, value=False)
@example(schema={"maxLength": 1}, value=["a", "b"])
@example(schema={"additionalProperties": False}, value={"a": 1})
@example(schema={"items": False}, value=[])
@example(schema={"not": {"type": "string"}}, value=3)
def test_a_made_up_schema_compiled_accepts_what_strict_validator_accepts(
    schema: Any, value: Any
) -> None:
    check = compiled(schema)
    assert check is not None, schema
    assert check(value) == _strict_valid(schema, value), (schema, value)


@pytest.mark.parametrize(
    "schema",
    [
        {"$ref": "#/$defs/a", "$defs": {"a": {"type": "string"}}},
        {"anyOf": [{"type": "string"}]},
        {"type": "object", "properties": {"a": {"oneOf": [{"type": "string"}]}}},
        {"patternProperties": {"^a": {"type": "string"}}},
        {"prefixItems": [{"type": "string"}]},
        {"multipleOf": 2},
        {"type": "decimal"},
        {"minLength": -1},
        {"maxLength": 2.0},
        {"enum": "ab"},
        {"pattern": "("},
        {"required": "a"},
    ],
)
def test_anything_else_is_left_to_strict_validator(schema: dict[str, Any]) -> None:
    assert compiled(schema) is None


def test_only_the_keywords_it_knows_are_compiled() -> None:
    assert {"type", "properties", "required", "additionalProperties", "not"} <= _KEYWORDS
    assert not {"$ref", "anyOf", "allOf", "oneOf", "if", "patternProperties"} & _KEYWORDS


def test_a_value_refused_is_told_as_before() -> None:
    schema = PayInvoice.schema
    good = {"invoice": "INV-1", "customer": "cus_1", "amount": 100, "currency": "eur"}
    assert schema_problems(schema, good) == []
    assert schema_problems(schema, {**good, "amount": 49.0, "x": 1}) == [
        "arguments: Additional properties are not allowed ('x' was unexpected)",
        "amount: 49.0 is not of type 'integer'",
    ]
    assert schema_problems(schema, {**good, "customer": "a\nb"}) == [
        "customer: must not contain control characters (line breaks, tabs, ...)"
    ]
