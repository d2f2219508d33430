"""The sandbox keeps its secret and takes orders only from this machine's own clients.

Attempts as a browser on this machine would make them when a hostile page drives it: a
cross-origin form post, a DNS-rebound name in the Host header; and as any local user
would: reading the webhook secret back, or from `ps`.
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys

from devtools.process import free_port
from sandbox.client import SandboxClient
from tests.sandbox.fixtures import REPO, SandboxHandle


def _request(
    handle: SandboxHandle, method: str, path: str, body: bytes | None = None, **headers: str
) -> tuple[int, dict[str, object]]:
    conn = http.client.HTTPConnection("127.0.0.1", handle.port, timeout=5)
    try:
        # skip_host: the test chooses the Host header itself (or sends the default one).
        conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        headers.setdefault("Host", f"127.0.0.1:{handle.port}")
        for name, value in headers.items():
            conn.putheader(name.replace("_", "-"), value)
        conn.putheader("Content-Length", str(len(body or b"")))
        conn.endheaders(body)
        reply = conn.getresponse()
        return reply.status, json.loads(reply.read() or b"{}")
    finally:
        conn.close()


def test_the_webhook_secret_is_never_returned(payments_sandbox: SandboxHandle) -> None:
    client = payments_sandbox.client
    changed = client.config(webhook_secret="whsec_do_not_show")
    try:
        assert changed["webhook_secret"] == "(set)"
        assert client.config()["webhook_secret"] == "(set)"
        status, body = _request(payments_sandbox, "GET", "/_sandbox/config")
        assert status == 200 and "whsec_do_not_show" not in json.dumps(body)
    finally:
        client.config(webhook_secret=None)


def test_a_foreign_host_is_refused(payments_sandbox: SandboxHandle) -> None:
    # What a browser sends after attacker.example was rebound to 127.0.0.1.
    for path in ("/_sandbox/ledger", "/v1/payment_intents"):
        status, body = _request(payments_sandbox, "GET", path, Host="attacker.example")
        assert status == 421, body
    assert _request(payments_sandbox, "GET", "/_sandbox/health")[0] == 200
    host = f"localhost:{payments_sandbox.port}"
    assert _request(payments_sandbox, "GET", "/_sandbox/health", Host=host)[0] == 200


def test_a_cross_origin_form_post_to_an_admin_endpoint_is_refused(
    mail_sandbox: SandboxHandle,
) -> None:
    form = b"operation=*&fault=down&delay=30"
    for headers in (
        # A classic form post from another site.
        {"Origin": "https://attacker.example", "Content_Type": "application/x-www-form-urlencoded"},
        # The same, from a browser that names the site relation instead.
        {"Sec_Fetch_Site": "cross-site", "Content_Type": "application/x-www-form-urlencoded"},
        # JSON in a text/plain body: what fetch() may send cross-origin without preflight.
        {"Origin": "null", "Content_Type": "text/plain"},
    ):
        status, _ = _request(mail_sandbox, "POST", "/_sandbox/faults", form, **headers)
        assert status in (403, 415), headers
    # Without an Origin, a form-encoded body is still refused: admin takes JSON only.
    status, _ = _request(
        mail_sandbox, "POST", "/_sandbox/reset", b"x=1", Content_Type="multipart/form-data"
    )
    assert status == 415
    status, _ = _request(
        mail_sandbox, "DELETE", "/_sandbox/faults", Origin="https://attacker.example"
    )
    assert status == 403
    assert mail_sandbox.client.faults() == []
    assert mail_sandbox.client.health()  # still up: no "down" fault got through


def test_same_origin_json_still_works(mail_sandbox: SandboxHandle) -> None:
    body = json.dumps({"operation": "messages.send", "fault": "rate_limit", "times": 1}).encode()
    origin = f"http://127.0.0.1:{mail_sandbox.port}"
    status, _ = _request(
        mail_sandbox,
        "POST",
        "/_sandbox/faults",
        body,
        Origin=origin,
        Sec_Fetch_Site="same-origin",
        Content_Type="application/json",
    )
    assert status == 200
    mail_sandbox.client.clear_faults()


def test_the_webhook_secret_is_given_by_environment_not_command_line() -> None:
    port = free_port()
    secret = "whsec_from_the_environment"
    proc = subprocess.Popen(
        [sys.executable, "-m", "sandbox.payments", "--port", str(port)],
        cwd=REPO,
        env={**os.environ, "SANDBOX_WEBHOOK_SECRET": secret},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        proc.stdout.readline()
        with open(f"/proc/{proc.pid}/cmdline", "rb") as f:
            assert secret.encode() not in f.read()
        client = SandboxClient(f"http://127.0.0.1:{port}")
        assert client.config()["webhook_secret"] == "(set)"
    finally:
        proc.terminate()
        proc.wait(timeout=5)
