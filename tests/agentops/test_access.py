"""Operators only (issue 8): the queue pages need a permission, and logins are throttled."""

from __future__ import annotations

import secrets
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.test import Client, override_settings

from agentops.access import client_ip

pytestmark = pytest.mark.usefixtures("committed")

PASSWORD = "a long password for tests"  # noqa: S105

QUEUE_PAGES = [
    "/django-rq/",
    "/django-rq/stats.json",
    "/django-rq/queues/0/",
    "/django-rq/queues/0/failed/",
    "/django-rq/queues/0/finished/",
    "/django-rq/workers/0/",
]


def _user(**flags: Any) -> Any:
    return get_user_model().objects.create_user(
        username=f"u-{secrets.token_hex(4)}", password=PASSWORD, **flags
    )


def _client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.parametrize("page", QUEUE_PAGES)
def test_staff_without_the_permission_cannot_see_the_queues(page: str) -> None:
    assert _client(_user(is_staff=True)).get(page).status_code == 403


def test_staff_cannot_empty_a_queue_or_delete_failed_jobs() -> None:
    client = _client(_user(is_staff=True))
    assert client.post("/django-rq/queues/0/empty/").status_code == 403
    assert client.post("/django-rq/queues/0/failed/clear/").status_code == 403


def test_anonymous_users_are_sent_to_the_login_page() -> None:
    response = Client().get("/django-rq/queues/0/failed/")
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/?next=")


def test_operators_with_the_permission_and_superusers_see_the_queues() -> None:
    operator = _user(is_staff=True)
    operator.user_permissions.add(
        Permission.objects.get(content_type__app_label="django_rq", codename="admin")
    )
    superuser = _user(is_staff=True, is_superuser=True)
    for user in (operator, superuser):
        client = _client(get_user_model().objects.get(pk=user.pk))
        for page in ("/django-rq/", "/django-rq/queues/0/failed/"):
            assert client.get(page).status_code == 200, (user, page)


def _login(client: Client, username: str, password: str) -> int:
    response = client.post(
        "/admin/login/?next=/admin/", {"username": username, "password": password}
    )
    return int(response.status_code)


def _address() -> str:
    # Each test throttles its own address: lockouts are stored in the shared database.
    return f"10.{secrets.randbelow(250)}.{secrets.randbelow(250)}.{secrets.randbelow(250) + 1}"


@override_settings(AXES_FAILURE_LIMIT=3)
def test_logins_from_an_address_are_locked_out_after_repeated_failures() -> None:
    user = _user(is_staff=True, is_superuser=True)
    attacker = Client(REMOTE_ADDR=_address())
    for _ in range(2):
        assert _login(attacker, user.username, "wrong guess") == 200  # the form, again
    assert _login(attacker, user.username, "wrong guess") == 429
    # Locked out: even the right password is refused now, and nobody is logged in.
    assert _login(attacker, user.username, PASSWORD) == 429
    assert "_auth_user_id" not in attacker.session
    # The operator, from their own address, is not.
    operator = Client(REMOTE_ADDR=_address())
    assert _login(operator, user.username, PASSWORD) == 302
    assert operator.session["_auth_user_id"] == str(user.pk)


def test_a_forged_forwarded_for_does_not_give_a_fresh_address() -> None:
    request: Any = type("R", (), {"META": {"REMOTE_ADDR": "10.0.0.9"}})()
    request.META["HTTP_X_FORWARDED_FOR"] = "1.2.3.4"
    assert client_ip(request) == "10.0.0.9"  # no proxy declared: the header is ignored
    with override_settings(BEHIND_PROXY=True):
        request.META["HTTP_X_FORWARDED_FOR"] = "1.2.3.4, 203.0.113.7"
        assert client_ip(request) == "203.0.113.7"  # what our proxy saw, not the claim
