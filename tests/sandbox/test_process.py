"""Each provider starts with one command, says it is ready, and stops on SIGTERM/SIGINT."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from devtools.process import free_port
from sandbox.client import SandboxClient
from tests.sandbox.fixtures import REPO


@pytest.mark.parametrize(
    ("module", "sig"),
    [("payments", signal.SIGTERM), ("mail", signal.SIGINT), ("bookings", signal.SIGTERM)],
)
def test_ready_line_and_clean_stop(module, sig):
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", f"sandbox.{module}", "--port", str(port), "--key-lifetime", "5"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == f"ready on http://127.0.0.1:{port}"
        client = SandboxClient(f"http://127.0.0.1:{port}")
        assert client.health()
        assert client.config()["key_lifetime"] == 5
        proc.send_signal(sig)
        assert proc.wait(timeout=5) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
