"""The provider contract (docs/your-own/provider-contract.md) against its runnable example
(examples/provider): every request on the page is sent, as written, to a fresh provider and
must get the answer written under it; the page's tool must send what the requests show; and
that tool, driven against the provider, must settle each case as the page says."""

from __future__ import annotations

import http.client
import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock
from urllib.parse import unquote, urlsplit

import pytest
from django.test import override_settings

from agentops import effects
from journal.outcomes import StepState, classify

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "your-own" / "provider-contract.md"
LIFETIME = 2.0  # seconds the provider under test keeps keys (the page's keeps a day)
KEY = "ao:5f0c6f0e-8a47-4c1e-9d55-2b7a1c3e9f10:1"


@dataclass(frozen=True)
class Message:
    start: str  # the request line or the status line
    headers: dict[str, str]
    body: Any


@dataclass(frozen=True)
class Case:
    name: str
    request: Message
    response: Message


def _message(block: str) -> Message:
    head, _, body = block.strip("\n").partition("\n\n")
    start, *lines = head.splitlines()
    headers = dict(line.split(": ", 1) for line in lines)
    return Message(start, headers, json.loads(body) if body.strip() else None)


def cases() -> list[Case]:
    """The page's cases, in order: each ``<!-- case: NAME -->`` and the two ``http`` blocks
    after it (the request, then the answer)."""
    text = PAGE.read_text()
    found = []
    for part in re.split(r"<!-- case: ", text)[1:]:
        name = part.split(" -->", 1)[0]
        blocks = re.findall(r"```http\n(.*?)```", part, re.DOTALL)
        assert len(blocks) >= 2, f"case {name}: a request and its answer"
        found.append(Case(name, _message(blocks[0]), _message(blocks[1])))
    return found


def the_tool() -> type[effects.HttpTool]:
    """The page's own tool, its Python block run as written (not registered)."""
    [source] = re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.DOTALL)
    scope: dict[str, Any] = {}
    with mock.patch.object(effects, "register_tool", lambda tool: tool):
        exec(compile(source, str(PAGE), "exec"), scope)  # noqa: S102 - the page's own code
    tool: type[effects.HttpTool] = scope["IssueVoucher"]
    return tool


@pytest.fixture
def provider() -> Iterator[str]:
    """A fresh examples/provider as a process of its own; its address."""
    process = subprocess.Popen(
        [sys.executable, "-m", "examples.provider", "--port", "0", "--key-lifetime", str(LIFETIME)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line.startswith("ready on "), line
    yield line.split()[-1]
    process.terminate()
    process.wait(timeout=10)


def send(base: str, request: Message) -> tuple[int, dict[str, str], Any]:
    method, target, _ = request.start.split(" ")
    parts = urlsplit(base)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)
    body = json.dumps(request.body).encode() if request.body is not None else None
    connection.request(method, target, body=body, headers=request.headers)
    response = connection.getresponse()
    data = response.read()
    connection.close()
    return response.status, dict(response.getheaders()), json.loads(data) if data else None


def test_the_page_has_every_case_of_the_contract() -> None:
    assert [c.name for c in cases()] == [
        "create",
        "replay",
        "other-arguments",
        "refused",
        "lookup-found",
        "lookup-empty",
        "expired-lookup",
        "expired-post",
    ]


def test_every_request_on_the_page_gets_the_answer_written_under_it(provider: str) -> None:
    started = time.monotonic()
    for case in cases():
        if case.name.startswith("expired") and time.monotonic() - started < LIFETIME:
            assert time.monotonic() - started < LIFETIME * 0.9, "too slow to see a kept key"
            time.sleep(LIFETIME - (time.monotonic() - started) + 0.2)  # the key is forgotten
        status, headers, body = send(provider, case.request)
        _, written, _ = case.response.start.split(" ", 2)
        assert status == int(written), (case.name, body)
        assert body == case.response.body, case.name
        for name, value in case.response.headers.items():
            assert headers.get(name) == value, (case.name, name, headers)


@dataclass
class Sent:
    method: str
    target: str
    headers: dict[str, str]
    body: Any


def test_the_tool_sends_exactly_the_requests_on_the_page() -> None:
    """Each request of the page, made by the page's tool (its call for a POST, its lookup for
    a GET), as it leaves agentops' HTTP client: the same method, path and query, the headers
    the page shows with the values it shows, and the same JSON body."""
    tool = the_tool()
    sent: list[Sent] = []

    def send(method: str, url: str, body: bytes | None, headers: dict[str, str], timeout: float):
        parts = urlsplit(url)
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        sent.append(Sent(method, target, dict(headers), json.loads(body) if body else None))
        return mock.Mock(status=200, data=b'{"data": []}')

    settings = {"VOUCHERS_API_BASE": "http://127.0.0.1:9", "VOUCHERS_KEY_LIFETIME_SECONDS": 86400}
    with override_settings(**settings), mock.patch("agentops.effects._http._send", send):
        made = tool()
        for case in cases():
            method, target, _ = case.request.start.split(" ")
            if method == "POST":
                key = case.request.headers[tool.key_header]
                args = {k: v for k, v in case.request.body.items() if k != tool.key_field}
                made.call(args, key=key)
            else:  # a lookup: the key in the query, no key header, the items under "data"
                key = unquote(target.split("=", 1)[1])
                made.lookup({}, key=key)
                for item in case.response.body[tool.lookup_list]:
                    assert made.matches(item, key=key), case.name
            request = sent.pop()
            assert (request.method, request.target) == (method, target), case.name
            shown = {name: request.headers.get(name) for name in case.request.headers}
            assert shown == case.request.headers, case.name
            assert request.body == case.request.body, case.name
            if method == "GET":
                assert tool.key_header not in request.headers, case.name


def test_the_tool_settles_each_case_as_the_page_says(provider: str) -> None:
    tool = the_tool()
    args = {"order": "ORD-1001", "amount": 1500, "currency": "eur"}
    with override_settings(
        VOUCHERS_API_BASE=provider, VOUCHERS_KEY_LIFETIME_SECONDS=LIFETIME, TOOL_TIMEOUT_SECONDS=5
    ):
        made = tool()
        assert made.key_lifetime.total_seconds() == LIFETIME

        def outcome(call_args: dict[str, Any], key: str) -> Any:
            seen = made.call(call_args, key=key)
            return classify(seen, earlier_attempt=False, evidence=made.evidence)

        created = outcome(args, KEY)  # create: done, with the voucher's id
        assert created.state == StepState.DONE
        evidence = created.data["evidence"]
        assert evidence["id"].startswith("vch_")
        assert outcome(args, KEY).data["evidence"] == evidence  # replay: the same, no second
        other = outcome({**args, "amount": 2500}, KEY)  # the same key, other arguments
        assert (other.state, other.data.get("bug")) == (StepState.UNKNOWN, True)
        refused = outcome({**args, "amount": 60_000}, KEY.replace(":1", ":2"))
        assert (refused.state, refused.data["code"]) == (StepState.NOT_DONE, "amount_too_large")
        found = made.lookup(args, key=KEY)  # lookup found: done with the same evidence
        assert found is not None and found.data["evidence"] == evidence
        assert made.lookup(args, key=KEY.replace(":1", ":3")) is None  # lookup empty
        time.sleep(LIFETIME + 0.2)  # the provider forgets the key; the voucher keeps it
        found = made.lookup(args, key=KEY)
        assert found is not None and found.data["evidence"] == evidence
        listed = made.fetch("/v1/vouchers", {}, reference=KEY)["data"]
        assert [v["id"] for v in listed] == [evidence["id"]]  # one voucher, whatever was asked
    asked = pytest.raises(LookupError, match="could not be asked")  # cannot tell: never a no
    with override_settings(VOUCHERS_API_BASE="http://127.0.0.1:9"), asked:
        made.lookup(args, key=KEY)
