"""Who is calling: a client's token, its scopes, and how often it may call.

A token is ``ao_live_`` and 43 random URL-safe characters (``secrets.token_urlsafe(32)``:
256 bits), sent as ``Authorization: Bearer <token>``. Only its first characters
(``ApiClient.prefix``, to find the row) and its SHA-256 are stored; the hash is compared in
constant time. A session cookie never authenticates an API call: only that header is read,
so a browser logged in to the operators' pages, or a page that makes it send a request,
gets 401 — which is why the API needs no CSRF check.

The rate limit is a fixed window per client, counted by one UPDATE of the client's own row
by the database's clock: it holds across gunicorn workers and machines, and Redis, which is
only a doorbell here, is not asked.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import secrets
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models.functions import Now
from django.http import HttpRequest
from ninja.errors import HttpError
from ninja.security import HttpBearer

from agentops.models import ApiClient, ApiScope

TOKEN_PREFIX = "ao_live_"  # noqa: S105 (a token's recognisable start, not a secret)
# Characters of the token, after TOKEN_PREFIX, kept to find its row: 12 of 43 (72 bits).
LOOKUP_CHARS = 12


class ApiClientRefused(ValueError):
    """A client that cannot be created or revoked as asked; the message says why."""


class RateLimited(HttpError):
    """Too many requests in this client's window: 429, and when to try again."""

    def __init__(self, retry_after: int) -> None:
        super().__init__(
            429,
            f"rate limit: at most {settings.API_RATE_LIMIT} requests a minute for this "
            f"client; try again in {retry_after} s",
        )
        self.retry_after = retry_after


class MissingScope(HttpError):
    def __init__(self, client: ApiClient, scope: ApiScope) -> None:
        super().__init__(
            403,
            f"this client ({client.name}) may not {scope.label}: its token lacks the scope "
            f"{scope.value}; create a client with --scope {scope.value}",
        )


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _lookup(token: str) -> str:
    return token[: len(TOKEN_PREFIX) + LOOKUP_CHARS]


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a client, or None."""
    if not name or len(name) > 100 or any(c.isspace() or not c.isprintable() for c in name):
        return (
            "a client's name is 1 to 100 printable characters without spaces (it is recorded "
            "as api:<name>)"
        )
    return None


def api_client_create(*, name: str, scopes: list[str]) -> tuple[ApiClient, str]:
    """Make a client and its token; the token is returned here and never again."""
    name = name.strip()
    problem = name_problem(name)
    if problem is not None:
        raise ApiClientRefused(problem)
    unknown = sorted(set(scopes) - set(ApiScope.values))
    if unknown:
        raise ApiClientRefused(
            f"unknown scope {', '.join(unknown)} (known: {', '.join(ApiScope.values)})"
        )
    if not scopes:
        raise ApiClientRefused(f"give it at least one scope ({', '.join(ApiScope.values)})")
    if ApiClient.objects.filter(name=name).exists():
        raise ApiClientRefused(f"there is already a client named {name}")
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    try:
        with transaction.atomic():
            client = ApiClient.objects.create(
                name=name,
                prefix=_lookup(token),
                token_hash=token_hash(token),
                scopes=sorted(set(scopes)),
            )
    except IntegrityError as exc:  # the same name, made at the same moment
        raise ApiClientRefused(f"there is already a client named {name}") from exc
    return client, token


def api_client_revoke(*, name: str) -> ApiClient:
    """Revoke a client's token for good: from now on it gets 401. The row stays (the journal
    names it)."""
    updated = ApiClient.objects.filter(name=name, revoked_at__isnull=True).update(revoked_at=Now())
    client = ApiClient.objects.filter(name=name).first()
    if client is None:
        raise ApiClientRefused(f"there is no client named {name}")
    if not updated:
        raise ApiClientRefused(f"client {name} was already revoked on {client.revoked_at}")
    return client


def api_client_authenticate(*, token: str) -> ApiClient | None:
    """The live client whose token this is, or None."""
    if not token.startswith(TOKEN_PREFIX) or len(token) > 200:
        return None
    client = ApiClient.objects.filter(prefix=_lookup(token), revoked_at__isnull=True).first()
    if client is None or not hmac.compare_digest(client.token_hash, token_hash(token)):
        return None
    return client


def api_client_count(*, client: ApiClient) -> int | None:
    """Count one request in the client's window (and note when it was last used): None while
    it is within ``API_RATE_LIMIT``, else the seconds until its window ends."""
    table = connection.ops.quote_name(ApiClient._meta.db_table)
    with connection.cursor() as cursor:
        # One statement, so two workers never both see the last free request: the row lock
        # orders them, and each sees the other's count.
        cursor.execute(
            f"""
            UPDATE {table}
               SET rate_count = CASE WHEN rate_window = date_trunc('minute', now())
                                     THEN rate_count + 1 ELSE 1 END,
                   rate_window = date_trunc('minute', now()),
                   last_used_at = now()
             WHERE id = %s AND revoked_at IS NULL
         RETURNING rate_count,
                   extract(epoch FROM date_trunc('minute', now()) + interval '1 minute' - now())
            """,  # noqa: S608 (the table's name is ours, quoted)
            [client.pk],
        )
        row = cursor.fetchone()
    if row is None:  # revoked since it was read: the next request gets 401
        return None
    count, left = row
    if count <= settings.API_RATE_LIMIT:
        return None
    return max(1, math.ceil(float(left)))


class ClientToken(HttpBearer):
    """``Authorization: Bearer ao_live_…``: the client, counted against its rate limit."""

    def authenticate(self, request: HttpRequest, token: str) -> ApiClient | None:
        client = api_client_authenticate(token=token)
        if client is None:
            return None
        retry_after = api_client_count(client=client)
        if retry_after is not None:
            raise RateLimited(retry_after)
        return client


def client_of(request: HttpRequest, scope: ApiScope) -> ApiClient:
    """The authenticated client, if its token carries ``scope`` (else 403, saying which)."""
    client: Any = getattr(request, "auth", None)
    if not isinstance(client, ApiClient):  # never: every endpoint but the schema has auth
        raise HttpError(401, "Unauthorized")
    if not client.may(scope.value):
        raise MissingScope(client, scope)
    return client
