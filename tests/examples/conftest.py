"""The support example's provider as a process of its own, started from what the example
declares (its ``Sandbox``) by the same helpers as the shipped sandboxes (devtools.sandboxes)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agentops.effects import registry
from devtools.sandboxes import SandboxHandle, sandbox_start, sandboxes_stop


@pytest.fixture(scope="session")
def support_sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxHandle]:
    declared = registry.sandboxes["support"]
    log = tmp_path_factory.mktemp("sandboxes") / "support.log"
    handle = sandbox_start(declared.name, output=log, module=declared.module)
    yield handle
    sandboxes_stop(handle)
