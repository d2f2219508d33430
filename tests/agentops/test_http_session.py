"""The providers' requests session reads the environment once per address and request
settings, and finds what requests itself finds (agentops.effects._http._ProviderSession)."""

from __future__ import annotations

from typing import Any

import pytest
import requests

from agentops.effects._http import _ProviderSession

URL = "http://127.0.0.1:8101/v1/payment_intents"


def test_the_environment_is_read_once_per_address_and_request_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    monkeypatch.setenv("NO_PROXY", "localhost")
    real = requests.Session.merge_environment_settings
    reads: list[Any] = []

    def counted(self: requests.Session, *args: Any) -> Any:
        reads.append(args)
        return real(self, *args)

    monkeypatch.setattr(requests.Session, "merge_environment_settings", counted)
    session = _ProviderSession()
    # As the stripe library asks: its CA bundle named in every request.
    seen = [session.merge_environment_settings(URL, {}, None, "/ca.pem", None) for _ in range(3)]
    assert len(reads) == 1
    assert seen[0] == seen[2] == real(requests.Session(), URL, {}, None, "/ca.pem", None)
    seen[0]["proxies"]["http"] = "changed by a caller"
    assert "http" not in session.merge_environment_settings(URL, {}, None, "/ca.pem", None)[
        "proxies"
    ]
    # Other settings, another address: read again, once each.
    session.merge_environment_settings(URL, {}, None, False, None)
    session.merge_environment_settings("https://api.stripe.com/v1/x", {}, None, "/ca.pem", None)
    session.merge_environment_settings(URL, {"https": "http://other:1"}, None, "/ca.pem", None)
    assert len(reads) == 4
    https = session.merge_environment_settings("https://api.stripe.com/v1/y", {}, None, None, None)
    assert https["proxies"]["https"] == "http://proxy.example:3128"
