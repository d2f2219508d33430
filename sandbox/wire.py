"""What the HTTP layer and a provider's handlers exchange: a parsed request, a reply,
Stripe-shaped errors, and the object ids they carry.

Standard library only, like the rest of ``sandbox``.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

JSON = dict[str, Any]


ID_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


def new_id(prefix: str, n: int = 24) -> str:
    """``prefix`` and ``n`` characters of ID_ALPHABET, unpredictable: one read of the system's
    randomness, not one a character (``secrets.choice`` reads it each time). Bytes at or
    above the largest multiple of 62 under 256 are dropped, so every character is as likely."""
    out: list[str] = []
    while len(out) < n:
        out += [ID_ALPHABET[b % 62] for b in secrets.token_bytes(2 * n) if b < 248]
    return prefix + "".join(out[:n])


class ApiError(Exception):
    """An error reply: raised by handlers, turned into ``{"error": {...}}``."""

    def __init__(
        self,
        status: int,
        type_: str,
        message: str,
        *,
        code: str | None = None,
        param: str | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(message)
        self.status = status
        err: JSON = {"type": type_, "message": message}
        if code is not None:
            err["code"] = code
        if param is not None:
            err["param"] = param
        err.update(extra)
        self.body: JSON = {"error": err}


def invalid(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(400, "invalid_request_error", message, param=param, code=code)


def missing(kind: str, object_id: str, param: str = "id") -> ApiError:
    return ApiError(
        404,
        "invalid_request_error",
        f"No such {kind}: '{object_id}'",
        code="resource_missing",
        param=param,
    )


@dataclass
class Request:
    method: str
    path: str
    query: JSON
    headers: dict[str, str]  # lower-cased names
    body: bytes
    params: JSON
    route_params: dict[str, str]
    request_id: str

    @property
    def idempotency_key(self) -> str | None:
        return self.headers.get("idempotency-key") or None


@dataclass
class Response:
    status: int
    body: JSON
    headers: dict[str, str] = field(default_factory=dict)
    raw: bytes | None = None
    """Sent instead of ``body`` as JSON (a lying reply: empty, or HTML)."""
    content_type: str = "application/json"


Handler = Callable[[Request], Response | JSON]


class DropConnection(Exception):
    """Close the connection without replying (``rst`` = abortive close)."""

    def __init__(self, rst: bool) -> None:
        super().__init__("drop")
        self.rst = rst


def refusal_body(code: str, message: str) -> JSON:
    return {"error": {"type": "invalid_request_error", "code": code, "message": message}}
