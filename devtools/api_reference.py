"""The HTTP API's reference (docs/api.md), rendered from its OpenAPI schema, never typed.

The schema is the one ``/api/v1/openapi.json`` serves, made here in-process from the
django-ninja API object (``agentops.api.views.api``): each operation's method and path, its
summary and description, the scope it needs (``x-scope``), its parameters, its request body's
fields, and its answers with what each means; then the schemas the answers hold.
``python -m devtools.api_reference --write docs/api.md`` puts it between the page's markers
(``--check docs/api.md`` says whether the page holds it; with neither, it is printed). A test
checks that the page holds exactly what the API says, so a change to the API without
rendering the page again fails.

A tool: the product never imports it.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Mapping, Sequence
from http import HTTPStatus
from pathlib import Path
from typing import Any

PAGE = Path(__file__).resolve().parents[1] / "docs" / "api.md"
BEGIN = "<!-- api reference: rendered by python -m devtools.api_reference; do not edit -->"
END = "<!-- end of the api reference -->"
REF = "#/components/schemas/"
METHODS = ("get", "post", "put", "patch", "delete")

Schema = Mapping[str, Any]


def openapi_schema() -> dict[str, Any]:
    """The API's OpenAPI schema, as ``/api/v1/openapi.json`` serves it."""
    from django.apps import apps

    if not apps.ready:
        import django

        # The settings must load, but nothing is served and no database is asked.
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentops.settings")
        os.environ.setdefault("DJANGO_DEBUG", "1")
        os.environ.setdefault("DATABASE_URL", "postgres://render@127.0.0.1:1/none")
        os.environ.setdefault("LOG_LEVEL", "WARNING")  # not the apps' start-up notes
        django.setup()
    from agentops.api.views import api

    return dict(api.get_openapi_schema())


def anchor(method: str, path: str) -> str:
    """An operation's anchor on the page: ``post-api-v1-tasks-task_id-approve``."""
    return re.sub(r"[^a-z0-9_]+", "-", f"{method} {path}".lower()).strip("-")


def schema_anchor(name: str) -> str:
    return f"schema-{name.lower()}"


CODE = re.compile(r"(`+)(?:(?!\1).)+?\1", re.S)


def _text(text: str) -> str:
    """The schema's words as Markdown: ``<`` and ``>`` outside code are not HTML."""
    out, at = [], 0
    for code in CODE.finditer(text):
        out += [text[at : code.start()].replace("<", "&lt;").replace(">", "&gt;"), code.group()]
        at = code.end()
    out.append(text[at:].replace("<", "&lt;").replace(">", "&gt;"))
    return "".join(out).strip()


def _cell(text: str) -> str:
    """Text for a table's cell: on one line, its pipes escaped."""
    return " ".join(_text(text).split()).replace("|", "\\|")


def _value(value: Any) -> str:
    if isinstance(value, str):
        return f'`"{value}"`'
    if value is None:
        return "`null`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{value}`"


def type_of(schema: Schema) -> str:
    """A JSON schema's type, in words, a ``$ref`` linked to its schema on the page."""
    if "$ref" in schema:
        name = schema["$ref"].removeprefix(REF)
        return f"[`{name}`](#{schema_anchor(name)})"
    if "anyOf" in schema:
        parts = [p for p in schema["anyOf"] if p.get("type") != "null"]
        words = " or ".join(type_of(p) for p in parts)
        return f"{words} or null" if len(parts) < len(schema["anyOf"]) else words
    if "enum" in schema:
        return "one of " + ", ".join(_value(v) for v in schema["enum"])
    if "const" in schema:
        return _value(schema["const"])
    kind = schema.get("type", "any")
    if kind == "array":
        return f"array of {type_of(schema.get('items', {}))}"
    if kind == "object" and "properties" not in schema:
        extra = schema.get("additionalProperties")
        return f"object of {type_of(extra)}" if isinstance(extra, dict) and extra else "object"
    if "format" in schema:
        return f"{kind} ({schema['format']})"
    return str(kind)


CONSTRAINTS = (
    ("minimum", "at least {}", ""),
    ("maximum", "at most {}", ""),
    ("minLength", "at least {} character", "s"),
    ("maxLength", "at most {} character", "s"),
    ("minItems", "at least {} item", "s"),
    ("maxItems", "at most {} item", "s"),
)


def _bounds(schema: Schema) -> list[str]:
    return [
        text.format(schema[key]) + ("" if schema[key] == 1 else plural)
        for key, text, plural in CONSTRAINTS
        if key in schema
    ]


def _limits(schema: Schema) -> str:
    """A field's bounds and default, in words."""
    parts = _bounds(schema)
    for part in schema.get("anyOf", ()):
        parts += _bounds(part)
    if "default" in schema and schema["default"] not in ("", None, [], {}):
        parts.append(f"default {_value(schema['default'])}")
    return "; ".join(parts)


def _described(schema: Schema, description: str | None = None) -> str:
    text = description if description is not None else schema.get("description", "")
    limits = _limits(schema)
    if limits:
        text = text.strip()
        stop = "." if text.endswith(".") else ""
        text = f"{text.removesuffix('.')} ({limits}){stop}" if text else limits.capitalize()
    return _cell(text)


def fields_table(schema: Schema) -> list[str]:
    """An object schema's fields: name, type, whether required, what it is."""
    required = set(schema.get("required", ()))
    lines = ["| field | type | required | description |", "| --- | --- | --- | --- |"]
    for name, field in schema.get("properties", {}).items():
        lines.append(
            f"| `{name}` | {type_of(field)} | {'yes' if name in required else 'no'} "
            f"| {_described(field)} |"
        )
    return lines


def _resolve(spec: Schema, schema: Schema) -> tuple[str | None, Schema]:
    """A schema's name (if a ``$ref``) and the schema itself."""
    if "$ref" in schema:
        name = schema["$ref"].removeprefix(REF)
        return name, spec["components"]["schemas"][name]
    return None, schema


def _body_of(content: Mapping[str, Any]) -> tuple[str, Schema] | None:
    for media_type, value in content.items():
        if "schema" in value:
            return media_type, value["schema"]
    return None


def operation(spec: Schema, method: str, path: str, op: Schema) -> list[str]:
    lines = [f"### `{method.upper()} {path}` {{#{anchor(method, path)}}}", ""]
    summary = op.get("summary") or op.get("operationId", "")
    scope = op.get("x-scope")
    needs = f" Needs the scope `{scope}`." if scope else ""
    if not op.get("security"):
        needs = " Needs no token."
    lines += [f"**{summary}.**{needs}", ""]
    if op.get("description"):
        lines += [_text(op["description"]), ""]
    parameters = op.get("parameters", [])
    if parameters:
        lines += [
            "| parameter | in | type | required | description |",
            "| --- | --- | --- | --- | --- |",
        ]
        for p in parameters:
            schema = p.get("schema", {})
            lines.append(
                f"| `{p['name']}` | {p['in']} | {type_of(schema)} "
                f"| {'yes' if p.get('required') else 'no'} "
                f"| {_described(schema, p.get('description', schema.get('description', '')))} |"
            )
        lines.append("")
    body = _body_of(op.get("requestBody", {}).get("content", {}))
    if body is not None:
        media_type, schema = body
        name, resolved = _resolve(spec, schema)
        called = f" ([`{name}`](#{schema_anchor(name)}))" if name else ""
        lines += [f"The body{called}, as `{media_type}`:", "", *fields_table(resolved), ""]
    lines += ["| answer | meaning | body |", "| --- | --- | --- |"]
    for status, answer in sorted(op.get("responses", {}).items(), key=lambda kv: str(kv[0])):
        try:
            phrase = f"{status} {HTTPStatus(int(status)).phrase}"
        except ValueError:
            phrase = str(status)
        meaning = answer.get("description", "")
        if meaning == phrase.partition(" ")[2]:
            meaning = ""
        answered = _body_of(answer.get("content", {}))
        lines.append(
            f"| {phrase} | {_cell(meaning)} | {type_of(answered[1]) if answered else ''} |"
        )
    return [*lines, ""]


def component(name: str, schema: Schema) -> list[str]:
    lines = [f"### `{name}` {{#{schema_anchor(name)}}}", ""]
    if schema.get("description"):
        lines += [_text(schema["description"]), ""]
    if "properties" in schema:
        lines += fields_table(schema)
    else:
        lines.append(f"{type_of(schema)}.")
    return [*lines, ""]


def render(spec: Schema) -> str:
    """The page's block: every operation, then every schema, between the markers."""
    lines = [
        BEGIN,
        "",
        "## Endpoints",
        "",
        f"Rendered from the OpenAPI schema ({spec['openapi']}, "
        f"`{spec['info']['title']}` version {spec['info']['version']}) by "
        "`python -m devtools.api_reference --write docs/api.md`.",
        "",
    ]
    for path, item in spec["paths"].items():
        for method in METHODS:
            if method in item:
                lines += operation(spec, method, path, item[method])
    lines += ["## Schemas", "", "What the bodies above hold, by name.", ""]
    for name, schema in sorted(spec.get("components", {}).get("schemas", {}).items()):
        lines += component(name, schema)
    lines.append(END)
    return "\n".join(lines)


def page_block(text: str) -> str:
    """The rendered block a page holds, markers included."""
    start, end = text.index(BEGIN), text.index(END) + len(END)
    return text[start:end]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--write", type=Path, metavar="PAGE", help="replace the block there")
    group.add_argument("--check", type=Path, metavar="PAGE", help="exit 1 if it differs")
    options = parser.parse_args(argv)
    block = render(openapi_schema())
    if options.write is not None:
        text = options.write.read_text()
        options.write.write_text(text.replace(page_block(text), block))
    elif options.check is not None:
        if page_block(options.check.read_text()) != block:
            print(
                f"{options.check}: the API reference differs from the API's schema: "
                f"python -m devtools.api_reference --write {options.check}",
                file=sys.stderr,
            )
            return 1
    else:
        print(block)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
