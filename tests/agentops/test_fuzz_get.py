"""Bad input, clear errors (issue 38): no GET route answers 500 to a query parameter holding
a NUL or another unprintable character, a right-to-left override, an invalid UTF-8 escape
(``%ff``) or a very long string. Every route the URL resolver knows — the operators' pages,
the audit's, the customers', the HTTP API's — is asked, as an operator with every right (and,
for the API, with a token with every scope), with each parameter its views read and a few
generic ones. 400, 404 or 200 with a clear message are fine; 500 is not.

Real PostgreSQL (which refuses NUL in text): a NUL that reached a query would be a 500."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from agentops.api.auth import api_client_create
from agentops.effects import task_start
from agentops.models import ApiScope
from commerce.customers.links import payment_token
from journal.models import Task
from tests.agentops.test_api_own_tasks import client, held_trip
from tests.agentops.test_business_effects import renewal_refs
from tests.agentops.workers import quiet_world
from tests.journal.support import invoice

pytestmark = pytest.mark.usefixtures("committed", "redis")

# The routes of other projects' code (Django's admin, django-rq's pages) and those that take
# no GET are not asked.
SKIPPED = ("admin/", "django-rq/", "logout/", "webhooks/")
# Every GET parameter the views read (the task list's, the audit's, the API's, the task
# page's poll and actions') and a few generic ones.
PARAMS = sorted(
    {
        *("state", "q", "kind", "attention", "since", "until", "sort", "page", "fp", "next"),
        *("provider", "status", "ref", "per_page"),
    }
)
# As they are sent: already percent-encoded, into the query string.
VALUES = (
    "%00",
    "a%00b",
    "%01%02%7f",
    "%E2%80%AE",  # U+202E, the right-to-left override
    "%ff",  # not UTF-8
    "%C3%28",
    "x" * 5000,
    "1" * 400,
)


@pytest.fixture
def redis() -> Iterator[Any]:
    connection = quiet_world()
    yield connection
    connection.flushdb()


def routes(patterns: list[Any], prefix: str = "") -> Iterator[str]:
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            yield from routes(pattern.url_patterns, prefix + str(pattern.pattern))
        elif isinstance(pattern, URLPattern):
            yield prefix + str(pattern.pattern)


def filled(route: str, values: dict[str, str]) -> str:
    """The route with each of its parameters given a real value (by the parameter's name)."""
    return "/" + re.sub(r"<(?:\w+:)?(\w+)>", lambda m: values[m.group(1)], route)


def test_no_get_route_answers_500_to_unprintable_or_broken_parameters() -> None:
    made, token = api_client_create(
        name=f"fuzz-{uuid.uuid4().hex[:8]}", scopes=list(ApiScope.values)
    )
    inv = invoice()
    task = task_start(kind="renewal", goal="renew", refs=renewal_refs(inv), actor=made.actor)
    admin = get_user_model().objects.create_superuser(
        username=f"root-{uuid.uuid4().hex[:8]}", password="a-Long-enough-pass-1"
    )
    operator = Client(raise_request_exception=False)
    operator.force_login(admin)
    program = Client(raise_request_exception=False, HTTP_AUTHORIZATION=f"Bearer {token}")
    values = {
        "task_id": str(task.pk),
        "n": "1",
        "action": "reconcile",
        "finding_id": "1",
        "token": payment_token(inv, task.pk),
    }
    asked = [
        filled(r, values)
        for r in routes(get_resolver().url_patterns)
        if not r.startswith(SKIPPED) and "^" not in r
    ]
    assert {"/", "/audit/", "/api/v1/tasks", f"/tasks/{task.pk}"} <= set(asked)
    assert any(path.startswith("/pay/") for path in asked)
    failed = []
    for path in asked:
        http = program if path.startswith("/api/") else operator
        for name in PARAMS:
            for value in VALUES:
                answer = http.get(f"{path}?{name}={value}")
                if answer.status_code >= 500:
                    failed.append(f"GET {path}?{name}={value[:20]}: {answer.status_code}")
    assert failed == []
    # What the audit page answered 500 to: refused with a sentence, before any query.
    for name in ("q", "provider", "kind"):
        refused = operator.get(f"/audit/?{name}=%00")
        assert refused.status_code == 400
        assert f"the parameter {name} holds a control character" in refused.content.decode()
    assert operator.get("/audit/?q=%E2%80%AE").status_code == 200


def test_a_nul_in_an_actions_reason_or_digest_is_422_and_does_nothing() -> None:
    """Found beside the fuzz test: a reason holding NUL reached the journal (500)."""
    made, http = client()
    task = held_trip(made.actor)
    held = http.get(f"/api/v1/tasks/{task.pk}").json()["held"]
    for action, body, field in [
        ("resume", {"reason": "go\x00"}, "reason"),
        ("cancel", {"reason": "\x01stop"}, "reason"),
        ("reject", {"approval_id": held["approval_id"], "reason": "no\x00"}, "reason"),
        ("approve", {"approval_id": held["approval_id"], "digest": "\x00"}, "digest"),
    ]:
        answer = http.post(
            f"/api/v1/tasks/{task.pk}/{action}",
            json.dumps(body),
            content_type="application/json",
            headers={"Idempotency-Key": f"nul-{action}"},
        )
        assert answer.status_code == 422, (action, answer.content)
        said = answer.json()["problems"]
        assert said == [f"body.payload.{field}: must not contain control characters"]
    multi_line = {"reason": "looked at it\nand it can go on"}
    assert (
        http.post(
            f"/api/v1/tasks/{task.pk}/resume",
            json.dumps(multi_line),
            content_type="application/json",
        ).status_code
        == 409
    )  # read, and refused by the journal as things stand (not 422)
    assert Task.objects.get(pk=task.pk).status == "awaiting_approval"
