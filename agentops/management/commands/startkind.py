"""``manage.py startkind NAME [DIRECTORY]``: an app of your own, as ``startapp`` makes one —
a tool (an ``HttpTool`` whose provider's address and key lifetime are settings), a kind, a
playbook, a sandbox provider with faults, its tests and a README — in ``DIRECTORY/NAME``
(docs/your-own/startkind.md). Install it with ``AGENTOPS_APPS=NAME``."""

from __future__ import annotations

import keyword
import shutil
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

TEMPLATE = Path(__file__).resolve().parents[2] / "kind_template"
SUFFIX = "-tpl"
DEFAULT_PORT = 8120


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot be an app's name (it is its package, its kind and its settings'
    prefix), or None."""
    if not name.isidentifier() or not name.isascii():
        return (
            f"{name!r} is not a valid name: use letters, digits and underscores, starting "
            "with a letter (giftcard, gift_card)"
        )
    if keyword.iskeyword(name) or name != name.lower() or name.startswith("_"):
        return f"{name!r} is not a valid name: use a lower-case name that is not a Python keyword"
    try:
        taken = find_spec(name) is not None
    except (ImportError, ValueError):
        taken = True
    if taken:
        return f"{name!r} conflicts with the name of an existing Python module: choose another"
    return None


def render(text: str, context: dict[str, str]) -> str:
    for placeholder, value in context.items():
        text = text.replace("{{ " + placeholder + " }}", value)
    return text


class Command(BaseCommand):
    help = (
        "Make an app of your own for agentops: a tool, a kind, a playbook, a sandbox provider "
        "and its tests, in DIRECTORY/NAME (default: ./NAME). Install it with AGENTOPS_APPS=NAME."
    )
    # As startapp: it writes files, and needs nothing of the installed apps to be sound.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="the app's name: its package, its kind, its settings")
        parser.add_argument(
            "directory", nargs="?", default=".", help="where the app's folder is made"
        )
        parser.add_argument(
            "--port",
            type=int,
            default=DEFAULT_PORT,
            help="the port `make run` starts its sandbox on (default %(default)s)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        name: str = options["name"]
        problem = name_problem(name)
        if problem is not None:
            raise CommandError(problem)
        if not 0 < options["port"] < 65536:
            raise CommandError(f"--port {options['port']} is not a port (1 to 65535)")
        parent = Path(options["directory"]).expanduser()
        if not parent.is_dir():
            raise CommandError(f"{parent} is not a directory")
        target = parent / name
        if target.exists():
            raise CommandError(f"{target} already exists: nothing was written")
        context = {
            "name": name,
            "camel": "".join(part.capitalize() for part in name.split("_")),
            "upper": name.upper(),
            "port": str(options["port"]),
        }
        files = sorted(p for p in TEMPLATE.rglob("*" + SUFFIX) if p.is_file())
        try:
            target.mkdir()
        except OSError as exc:
            raise CommandError(
                f"cannot make {target}: {exc.strerror} (as root, `scripts/stack.py manage` runs "
                "manage.py as the app's user: name a directory that user may write to)"
            ) from exc
        try:
            for source in files:
                relative = source.relative_to(TEMPLATE)
                path = target / relative.parent / relative.name.removesuffix(SUFFIX)
                if path.name == "test_kind.py":
                    path = path.with_name(f"test_{name}.py")
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(render(source.read_text(), context))
        except OSError as exc:
            shutil.rmtree(target, ignore_errors=True)  # ours, made just now: no half an app
            raise CommandError(f"cannot write {target}: {exc}") from exc
        self.stdout.write(
            f"{target}: the app {name} (kind {name}, tool {name}_issue, sandbox "
            f"{name}.sandbox). Install it with PYTHONPATH={parent.resolve()} AGENTOPS_APPS={name}; "
            f"set {context['upper']}_API_BASE and {context['upper']}_KEY_LIFETIME_SECONDS "
            "(docs/your-own/startkind.md)."
        )
