"""The settings page (docs/settings.md), written from the code's declarations (agentops/conf.py).

``python -m devtools.settings_table --write docs/settings.md`` writes it;
``python -m devtools.settings_table --check docs/settings.md`` exits 1 when the page differs
from what the declarations say (tests/test_settings_table.py runs it).

The declarations are those made by what every process of agentops loads: Django's settings
and its apps (their tools' settings included, with the example app installed), gunicorn's
configuration and the MCP server's command. They are read in an environment of this module's
own (:data:`ENVIRONMENT`), so the page does not depend on the shell that writes it.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import os
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from agentops import conf
from agentops.conf import Setting

PAGE = Path("docs/settings.md")
KEPT = ("PATH", "HOME", "PYTHONPATH", "LANG", "LC_ALL", "TMPDIR", "VIRTUAL_ENV", "SYSTEMROOT")
"""What this process keeps of its own environment: none of it is one of agentops' settings."""
ENVIRONMENT = {
    "DJANGO_SETTINGS_MODULE": "agentops.settings",
    "DJANGO_DEBUG": "1",
    "DATABASE_URL": "postgres://settings-table@127.0.0.1:1/settings-table",
    "AGENTOPS_EXAMPLES": "1",
}
"""Enough for the settings to load (nothing is connected to), the example app installed."""
LOADED = ("agentops.gunicorn_conf", "agentops.management.commands.mcp_server")
"""What processes other than Django's load, besides Django's settings and apps."""

INTRO = """\
# Settings

Everything agentops reads is read from the environment: each process (the web server, the
workers, the sweeper, the MCP server, `manage.py`) reads the variables below when it starts,
and nothing else configures it. A tool's own settings may also be given as Django settings of
the same name.

Each variable is declared where the code reads it, with its default and meaning
(`agentops/conf.py`), and this page is written from those declarations
(`python -m devtools.settings_table --write docs/settings.md`): a test fails when it is out of
date, or when the code reads a variable that is not declared. Defaults suit the demo
(`make run`), which starts PostgreSQL, Redis and the sandbox providers and points the
variables at them.
"""


def declarations() -> list[Setting]:
    """Every declared setting, after loading what agentops' processes load (in this process:
    its environment is replaced by :data:`ENVIRONMENT` first)."""
    kept = {name: os.environ[name] for name in KEPT if name in os.environ}
    os.environ.clear()
    os.environ.update(kept)
    os.environ.update(ENVIRONMENT)
    import django

    django.setup()
    for module in LOADED:
        importlib.import_module(module)
    return list(conf.declared.values())


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def page(settings: Iterable[Setting]) -> str:
    """The page: the introduction, then a table of each group's variables, groups in the
    order they are first read, variables in the order they are declared."""
    groups: dict[str, list[Setting]] = {}
    for setting in settings:
        groups.setdefault(setting.group, []).append(setting)
    lines = [INTRO]
    for group, members in groups.items():
        lines += [f"## {group}", "", "| Variable | Default | Meaning |", "| --- | --- | --- |"]
        lines += [f"| `{s.name}` | {_cell(s.shown)} | {_cell(s.meaning)} |" for s in members]
        lines.append("")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.settings_table", description=__doc__)
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", metavar="PAGE", type=Path, help="write the page")
    action.add_argument("--check", metavar="PAGE", type=Path, help="exit 1 if it differs")
    args = parser.parse_args(argv)
    wanted = page(declarations())
    if args.write:
        args.write.write_text(wanted)
        print(f"wrote {args.write}")
        return 0
    found = args.check.read_text() if args.check.exists() else ""
    if found == wanted:
        return 0
    sys.stdout.writelines(
        difflib.unified_diff(
            found.splitlines(keepends=True),
            wanted.splitlines(keepends=True),
            fromfile=str(args.check),
            tofile="the declarations",
        )
    )
    print(
        f"{args.check} is not what the declarations say: "
        f"python -m devtools.settings_table --write {args.check}",
        file=sys.stderr,
    )
    return 1


if __name__ == "__main__":
    sys.exit(main())
