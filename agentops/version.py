"""Which code this process runs: its version, on the lease of every task it runs and in
``/metrics`` (docs/operating/many-machines.md: deploys while tasks run).

During a rolling deploy two versions run side by side against one journal; an operator reads
here which process ran what. The version is ``AGENTOPS_VERSION`` when the deployment sets it
(a release tag, an image digest), otherwise the package's own version and, in a git checkout,
the commit it stands on: read once, when first asked, never on a step's path.
"""

from __future__ import annotations

import functools
import importlib.metadata
import re
from pathlib import Path

from agentops.shared_settings import LOGS

_SHOWN = re.compile(r"[^A-Za-z0-9._+:@/-]")
REPO = Path(__file__).resolve().parent.parent


def _commit(repo: Path) -> str:
    """The commit a git checkout at ``repo`` stands on (12 hex digits), read from its files
    (no git program needed); empty when it is not a checkout or cannot be read."""
    git = repo / ".git"
    try:
        if git.is_file():  # a worktree: "gitdir: <path>"
            git = Path(git.read_text().split(":", 1)[1].strip())
        head = (git / "HEAD").read_text().strip()
        if not head.startswith("ref: "):
            return head[:12]
        ref = head[5:]
        common = git
        if (git / "commondir").exists():
            common = (git / (git / "commondir").read_text().strip()).resolve()
        for base in (git, common):
            if (base / ref).exists():
                return (base / ref).read_text().strip()[:12]
        packed = common / "packed-refs"
        for line in packed.read_text().splitlines() if packed.exists() else ():
            sha, _, name = line.partition(" ")
            if name == ref:
                return sha[:12]
    except (OSError, IndexError):
        return ""
    return ""


@functools.cache
def running_version() -> str:
    """This process's version: ``AGENTOPS_VERSION``, or the package's version with the
    checkout's commit (``0.1.0+g1a2b3c4d5e6f``). Printable, at most 80 characters."""
    return version_from(_declared(), REPO)


def _declared() -> str:
    return LOGS.text(
        "AGENTOPS_VERSION",
        "",
        "The version this process runs, as the deployment names it (a release tag, an image "
        "digest): on the lease of every task it runs (the task's page shows who runs it) and "
        "in `/metrics` (`agentops_version_seen_timestamp_seconds`), so that a rolling deploy's "
        "two versions can be told apart. Unset: the package's version and, in a git checkout, "
        "its commit.",
        shown="the package's version (+ the checkout's commit)",
        blank_is_default=True,
    )


def version_from(given: str, repo: Path) -> str:
    """The version named ``given``, or when none is, the package's with the commit of the
    checkout at ``repo``."""
    if not given:
        try:
            given = importlib.metadata.version("agentops")
        except importlib.metadata.PackageNotFoundError:
            given = "unknown"
        commit = _commit(repo)
        if commit:
            given = f"{given}+g{commit}"
    return _SHOWN.sub("_", given)[:80]


def runner_name(host: str, pid: int) -> str:
    """What a runner calls itself on a task's lease: where it runs and which version."""
    return f"{host}:{pid} agentops {running_version()}"
