"""What every agentops tool shares: a JSON schema for its arguments, and honest HTTP.

A tool implements the journal's ``Tool`` protocol (journal/protocols.py). This module turns
the outside world's failures into the journal's observations: a request that provably never
left is ``NotSent``; anything after bytes may have left is ``Interrupted``.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from datetime import timedelta
from typing import Any, ClassVar

import requests
from django.conf import settings
from jsonschema import Draft202012Validator, validators
from urllib3.exceptions import NewConnectionError

from journal.outcomes import Interrupted, NotSent, Observation, Outcome, Reply
from journal.protocols import CostClass

# Text that reaches a provider's headers (a subject, a name) or a ledger: no control
# character (C0, DEL, C1 — NEL, U+0085, among them) and no Unicode line or paragraph
# separator, so nothing can smuggle a header line or hide in a log. A search for one
# anywhere, negated: an anchored pattern would let a trailing newline through ($ matches
# before it).
NO_CONTROL: dict[str, Any] = {
    "not": {"type": "string", "pattern": "[\\x00-\\x1f\\x7f-\\x9f\\u2028\\u2029]"}
}

# JSON Schema calls 49.0 an integer; for money it is not. "integer" here means an int.
StrictValidator = validators.extend(  # type: ignore[no-untyped-call]
    Draft202012Validator,
    type_checker=Draft202012Validator.TYPE_CHECKER.redefine(
        "integer", lambda _checker, value: isinstance(value, int) and not isinstance(value, bool)
    ),
)


FORMATS = Draft202012Validator.FORMAT_CHECKER


class SchemaTool:
    """Base of the tools: arguments are checked against ``schema`` before anything is sent."""

    name: ClassVar[str]
    description: ClassVar[str]
    schema: ClassVar[dict[str, Any]]
    cost: CostClass = CostClass.FULL
    evidence: tuple[str, ...] = ()
    """What a done effect must carry (journal.protocols.Tool.evidence); every effect names it."""
    compensation: str | None = None
    irreversible: bool = False
    key_lifetime: timedelta = timedelta(hours=24)
    lookup_lag: timedelta = timedelta(0)

    @property
    def timeout(self) -> float:
        """Seconds a call waits for its provider; after that its outcome is unknown."""
        return float(settings.TOOL_TIMEOUTS.get(self.name, settings.TOOL_TIMEOUT_SECONDS))

    def validate(self, args: Mapping[str, Any]) -> list[str]:
        validator = StrictValidator(self.schema, format_checker=FORMATS)
        return [
            f"{'.'.join(str(p) for p in error.absolute_path) or 'arguments'}: "
            + (
                "must not contain control characters (line breaks, tabs, ...)"
                if error.validator == "not" and error.absolute_path
                else error.message
            )
            for error in sorted(validator.iter_errors(dict(args)), key=lambda e: list(e.path))
        ]

    def guard(self, args: Mapping[str, Any]) -> str | None:
        return None

    def once(self, args: Mapping[str, Any]) -> bool:
        return False

    def undo_args(self, args: Mapping[str, Any], evidence: Mapping[str, Any]) -> dict[str, Any]:
        raise NotImplementedError(f"{self.name} has no compensation")

    def standing(self, args: Mapping[str, Any], evidence: Mapping[str, Any]) -> bool | None:
        return None  # most effects cannot lapse by themselves

    @property
    def requests_per_call(self) -> int:
        """How many requests one call or one lookup may make in a row, each up to
        ``timeout``: what the runner's lease must outlast (agentops/checks.py)."""
        return 1

    def call(self, args: Mapping[str, Any], *, key: str) -> Observation:
        raise NotImplementedError

    def lookup(self, args: Mapping[str, Any], *, key: str) -> Outcome | None:
        raise NotImplementedError


def _causes(exc: BaseException) -> list[BaseException]:
    """The exception and everything it wraps: causes, contexts, and (as requests and urllib3
    do) exceptions passed as arguments or kept as ``reason``."""
    seen: list[BaseException] = []
    todo = [exc]
    while todo:
        link = todo.pop(0)
        if any(link is s for s in seen):
            continue
        seen.append(link)
        wrapped = [link.__cause__, link.__context__, getattr(link, "reason", None), *link.args]
        todo.extend(w for w in wrapped if isinstance(w, BaseException))
    return seen


def observe_exception(exc: BaseException) -> NotSent | Interrupted:
    """Classify a transport failure: did any byte of the request leave?

    Only a refused connection, an unresolved name, a connect timeout (no TCP connection, so
    no request) or a certificate that does not verify (the handshake stops before a byte of
    the request) proves the request was never sent. A reset, a read timeout or anything
    else may follow a request the provider received.
    """
    message = str(exc)[:500]
    for link in _causes(exc):
        if isinstance(
            link,
            requests.ConnectTimeout
            | NewConnectionError
            | ConnectionRefusedError
            | ssl.SSLCertVerificationError,
        ):
            return NotSent(type(link).__name__, message)
    for link in _causes(exc):
        if isinstance(link, requests.ReadTimeout | ConnectionResetError | TimeoutError):
            return Interrupted(type(link).__name__, message)
    return Interrupted(type(exc).__name__, message)


_sessions: dict[int, requests.Session] = {}


def http_session() -> requests.Session:
    """This process's HTTP session for providers: its connection pools and settings are
    made once, not per call (a provider that keeps connections alive keeps them)."""
    session = _sessions.get(os.getpid())
    if session is None:
        session = _sessions[os.getpid()] = requests.Session()
    return session


def http_call(
    method: str,
    url: str,
    *,
    key: str | None,
    timeout: float,
    json: Mapping[str, Any] | None = None,
    params: Mapping[str, Any] | None = None,
    api_key: str = "",
) -> Observation:
    """One HTTP request to a JSON provider, reported as what it saw."""
    headers = {"Accept": "application/json"}
    if key is not None:
        headers["Idempotency-Key"] = key
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    try:
        response = http_session().request(
            method, url, json=json, params=params, headers=headers, timeout=timeout
        )
    except requests.RequestException as exc:
        return observe_exception(exc)
    try:
        body = response.json()
    except ValueError:
        body = {}
    body = body if isinstance(body, dict) else {"data": body}
    raw_error = body.get("error")
    error: dict[str, Any] = raw_error if isinstance(raw_error, dict) else {}
    return Reply(
        response.status_code,
        evidence=body if response.ok else {},
        code=str(error.get("code") or error.get("type") or ""),
        message=str(error.get("message") or ""),
    )
