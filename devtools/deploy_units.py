"""The deployment recipe's systemd units (deploy/systemd/), read as systemd reads them, so that
the tests start every process with exactly the command line an operator installs.

A unit is sections of ``Key=value`` lines; a key may repeat (``EnvironmentFile=``), and a line
ending in a backslash goes on. :func:`command` turns a unit's ``ExecStart=`` into an argv for
a release at another place than ``/opt/agentops/current`` (a test's checkout), with the
instance name of a template (``agentops-worker@2``) put in for ``%i``.

Tooling: the product never imports it (pyproject.toml's import contracts).
"""

from __future__ import annotations

import os
import secrets
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
UNITS = REPO / "deploy" / "systemd"
ENVIRONMENTS = REPO / "deploy" / "env"
RELEASE = "/opt/agentops/current"
"""Where the units expect the release: a checkout with its ``.venv``."""


@dataclass(frozen=True)
class Unit:
    name: str
    sections: dict[str, list[tuple[str, str]]]

    def values(self, section: str, key: str) -> list[str]:
        return [v for k, v in self.sections.get(section, []) if k == key]

    def value(self, section: str, key: str) -> str:
        found = self.values(section, key)
        if len(found) != 1:
            raise LookupError(f"{self.name}: [{section}] {key}= is set {len(found)} times")
        return found[0]


def parse(text: str, name: str = "unit") -> Unit:
    """A unit file's sections, each a list of (key, value) in order."""
    sections: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] | None = None
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.strip()
        pending = ""
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], [])
            continue
        if current is None or "=" not in line:
            raise ValueError(f"{name}: not a unit line: {line!r}")
        key, _, value = line.partition("=")
        current.append((key.strip(), value.strip()))
    return Unit(name, sections)


def unit(name: str) -> Unit:
    """deploy/systemd/``name`` (``agentops-worker@.service`` for every worker)."""
    return parse((UNITS / name).read_text(), name)


def services() -> list[str]:
    return sorted(p.name for p in UNITS.glob("*.service"))


def command(name: str, *, release: Path = REPO, instance: str = "") -> list[str]:
    """The unit's ``ExecStart=`` as an argv, for the release at ``release``: its python the
    interpreter running this (the checkout's own ``.venv``, as the units expect)."""
    exec_start = unit(name).value("Service", "ExecStart")
    argv = shlex.split(exec_start.replace("%i", instance))
    python = f"{RELEASE}/.venv/bin/python"
    return [
        sys.executable if word == python else word.replace(RELEASE, str(release)) for word in argv
    ]


def environment_names(name: str) -> set[str]:
    """The settings the unit's environment files give it (deploy/env/, as installed in
    /etc/agentops/)."""
    names: set[str] = set()
    for path in unit(name).values("Service", "EnvironmentFile"):
        example = ENVIRONMENTS / Path(path.lstrip("-")).name
        for line in example.read_text().splitlines():
            if line and not line.startswith("#") and "=" in line:
                names.add(line.split("=", 1)[0])
    return names


def environment(**given: str) -> dict[str, str]:
    """The environment a unit's process is started with here: this process's own without
    agentops' and Django's settings (the units name theirs in their environment files), the
    production settings an installed unit runs with (DEBUG off, a secret key, plain HTTP on
    loopback, the sweeper and its grace quick enough for a test), and ``given``. Never the
    owner's credentials."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "AGENTOPS_"))}
    env.update(
        {
            "DJANGO_DEBUG": "0",
            "DJANGO_HTTPS": "0",
            "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
            "DJANGO_ALLOWED_HOSTS": "127.0.0.1",
            "SWEEP_INTERVAL_SECONDS": "0.3",
            "SWEEP_GRACE_SECONDS": "1",
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.pop("DATABASE_OWNER_URL", None)
    env.update(given)
    return env
