"""docs/api.md's reference is the API's own OpenAPI schema, rendered, never typed (issue 37): a
change to the API without ``python -m devtools.api_reference --write docs/api.md`` fails
here, as does an endpoint the page leaves out or a scope the schema says that the view does
not check. No database: the schema is made in-process."""

from __future__ import annotations

import inspect
import re
from typing import Any

import pytest

from devtools.api_reference import (
    BEGIN,
    END,
    PAGE,
    anchor,
    openapi_schema,
    page_block,
    render,
    type_of,
)

REGENERATE = (
    "docs/api.md's reference differs from the API: "
    "python -m devtools.api_reference --write docs/api.md"
)


@pytest.fixture(scope="module")
def spec() -> dict[str, Any]:
    return openapi_schema()


def operations(spec: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method, path, op)
        for path, item in spec["paths"].items()
        for method, op in item.items()
        if method in ("get", "post", "put", "patch", "delete")
    ]


def test_the_page_holds_what_the_tool_writes(spec: dict[str, Any]) -> None:
    text = PAGE.read_text()
    assert text.count(BEGIN) == 1 and text.count(END) == 1
    assert page_block(text) == render(spec), REGENERATE


def test_every_path_and_operation_of_the_schema_is_on_the_page(spec: dict[str, Any]) -> None:
    text = PAGE.read_text()
    assert spec["paths"], "the schema has no paths"
    for path in spec["paths"]:
        assert path.startswith("/api/v1/"), path
        assert f" {path}`" in text, f"{path} is not on docs/api.md"
    for method, path, _ in operations(spec):
        assert f"### `{method.upper()} {path}` {{#{anchor(method, path)}}}" in text


def test_the_hand_written_introduction_stays_above_the_reference() -> None:
    text = PAGE.read_text()
    intro = text[: text.index(BEGIN)]
    for kept in ("| scope | allows |", "Idempotency-Key", "already_done", "```sh"):
        assert kept in intro, kept
    assert not text[text.index(END) + len(END) :].strip(), "nothing after the reference"


def test_every_operation_says_the_scope_its_view_checks(spec: dict[str, Any]) -> None:
    """The schema's ``x-scope`` is the one the view's ``client_of`` demands, so the page
    cannot name a scope the code does not check."""
    from agentops.api.views import api
    from agentops.models import ApiScope

    checked = {}
    for _prefix, router in api._routers:
        for path_view in router.path_operations.values():
            for op in path_view.operations:
                source = inspect.getsource(op.view_func)
                scopes = re.findall(r"client_of\(request, ApiScope\.(\w+)\)", source)
                assert len(scopes) == 1, (op.view_func.__name__, scopes)
                checked[op.view_func.__name__] = ApiScope[scopes[0]].value
    said = {
        op["operationId"].rsplit("_tasks_", 1)[-1]: op.get("x-scope") for *_, op in operations(spec)
    }
    assert {name.removeprefix("tasks_"): scope for name, scope in checked.items()} == said


def test_types_are_rendered_in_words() -> None:
    assert type_of({"$ref": "#/components/schemas/TaskOut"}) == "[`TaskOut`](#schema-taskout)"
    assert type_of({"anyOf": [{"type": "integer"}, {"type": "null"}]}) == "integer or null"
    assert type_of({"type": "array", "items": {"type": "object"}}) == "array of object"
    assert type_of({"type": "string", "format": "uuid"}) == "string (uuid)"
    assert (
        type_of({"type": "string", "enum": ["done", "unknown"]}) == 'one of `"done"`, `"unknown"`'
    )
