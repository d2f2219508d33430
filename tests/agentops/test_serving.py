"""Served like production (issue 8): gunicorn, WhiteNoise, DEBUG off, health, no leaks.

Real gunicorn processes with the production settings module, against the test database
(as the app's role), probed over HTTP the way a browser, a load balancer or an attacker
sending forged headers would.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import secrets
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.test import RequestFactory, override_settings
from django.views.debug import ExceptionReporter

from agentops.health import HealthCheckMiddleware
from devtools.database import database_url
from devtools.process import end, free_port, spawn
from tests.sandbox.fixtures import wait_for

ROOT = Path(__file__).resolve().parents[2]


def _production_env(static_root: Path, **extra: str) -> dict[str, str]:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "agentops.settings",
        "DJANGO_DEBUG": "0",
        "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
        "DATABASE_URL": database_url("web"),  # as production serves it: the web role
        "DJANGO_STATIC_ROOT": str(static_root),
        **extra,
    }
    env.pop("DATABASE_OWNER_URL", None)  # the web server never gets the owner's credentials
    return env


@pytest.fixture(scope="module")
def static_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("static")
    subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--noinput", "--verbosity", "0"],
        cwd=ROOT,
        env=_production_env(root),
        check=True,
        timeout=120,
    )
    return root


class Served:
    def __init__(self, env: dict[str, str]) -> None:
        self.port = free_port()
        self.proc = spawn(
            [sys.executable, "-m", "gunicorn", "-c", "python:agentops.gunicorn_conf"]
            + ["--bind", f"127.0.0.1:{self.port}", "--workers", "1"],
            env=env,
        )
        wait_for(self._up, timeout=30, what="gunicorn to answer")

    def _up(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"gunicorn exited with {self.proc.returncode}")
        try:
            return self.get("/healthz")[0] in (200, 503)
        except OSError:
            return False

    def get(self, path: str, **headers: str) -> tuple[int, dict[str, str], bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            conn.request("GET", path, headers={"Host": "127.0.0.1", **headers})
            reply = conn.getresponse()
            return reply.status, {k.lower(): v for k, v in reply.getheaders()}, reply.read()
        finally:
            conn.close()

    def stop(self) -> None:
        end(self.proc, timeout=30)


@pytest.fixture
def serve(committed: None, static_root: Path) -> Iterator[Callable[..., Served]]:
    started: list[Served] = []

    def start(**extra: str) -> Served:
        served = Served(_production_env(static_root, **extra))
        started.append(served)
        return served

    yield start
    for served in started:
        served.stop()


def test_make_run_serves_the_admin_with_its_css_and_a_health_check(
    serve: Callable[..., Served],
) -> None:
    web = serve(DJANGO_HTTPS="0")
    status, headers, body = web.get("/admin/login/")
    assert status == 200, body[:500]
    assert headers["server"].startswith("gunicorn")
    css = re.findall(rb'href="(/static/admin/css/base\.[0-9a-f]+\.css)"', body)
    assert css, "the admin links its CSS by hashed name (manifest storage)"
    status, headers, body = web.get(css[0].decode(), **{"Accept-Encoding": "gzip"})
    assert status == 200
    assert headers["content-type"].startswith("text/css")
    assert headers.get("content-encoding") == "gzip"
    assert "immutable" in headers["cache-control"]
    status, headers, body = web.get("/healthz")
    assert (status, json.loads(body)) == (200, {"database": "ok", "redis": "ok"})
    # DEBUG is off: an unknown page is a plain 404, not Django's URL listing.
    status, _, body = web.get("/no-such-page/")
    assert status == 404 and b"URLconf" not in body


def test_production_ignores_a_forged_forwarded_proto_without_a_proxy(
    serve: Callable[..., Served],
) -> None:
    web = serve()
    status, headers, _ = web.get("/admin/login/", **{"X-Forwarded-Proto": "https"})
    # Not believed: the request is still plain HTTP, so it is sent to HTTPS.
    assert status == 301
    assert headers["location"] == "https://127.0.0.1/admin/login/"
    assert "strict-transport-security" not in headers  # HSTS only over HTTPS
    # A load balancer's probe over plain HTTP is answered, not redirected.
    assert web.get("/healthz")[0] == 200
    # A foreign Host is refused.
    assert web.get("/admin/login/", Host="evil.example")[0] == 400


def test_behind_a_declared_proxy_its_forwarded_proto_is_believed(
    serve: Callable[..., Served],
) -> None:
    web = serve(DJANGO_BEHIND_PROXY="1")
    status, headers, _ = web.get("/admin/login/", **{"X-Forwarded-Proto": "https"})
    assert status == 200
    assert headers["strict-transport-security"].startswith("max-age=31536000")
    assert "secure" in headers["set-cookie"].lower()
    assert web.get("/admin/login/")[0] == 301


def test_health_check_says_503_when_redis_is_unreachable() -> None:
    dead = {"default": {**settings.RQ_QUEUES["default"], "URL": "redis://127.0.0.1:9/0"}}
    request = RequestFactory().get("/healthz")
    with override_settings(RQ_QUEUES=dead):
        response = HealthCheckMiddleware(lambda r: None)(request)  # type: ignore[arg-type,return-value]
    assert response.status_code == 503
    assert json.loads(response.content)["redis"] == "unreachable"


def _manage_check(**env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "agentops.settings", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("key", "why"),
    [
        ("abc", "3 characters"),
        ("a" * 60, "fewer than 5 distinct"),
        ("django-insecure-" + secrets.token_urlsafe(50), "generated for development"),
    ],
)
def test_production_refuses_a_weak_secret_key(key: str, why: str) -> None:
    result = _manage_check(DJANGO_DEBUG="0", DJANGO_SECRET_KEY=key)
    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY is too weak" in result.stderr and why in result.stderr


def test_plain_http_is_refused_for_a_public_host() -> None:
    result = _manage_check(
        DJANGO_DEBUG="0",
        DJANGO_SECRET_KEY=secrets.token_urlsafe(50),
        DJANGO_HTTPS="0",
        DJANGO_ALLOWED_HOSTS="ops.example.com",
    )
    assert result.returncode != 0
    assert "DJANGO_HTTPS=0" in result.stderr


TOKEN = "sk_live_" + secrets.token_hex(8)


def _request_with_a_bearer_token() -> Any:
    # Made here, not in the test: the error page quotes the source around each frame.
    return RequestFactory().get("/", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")


def test_debug_error_pages_show_no_credentials() -> None:
    database_password = settings.DATABASES["default"]["PASSWORD"]
    redis_url = settings.RQ_QUEUES["default"]["URL"]
    assert database_password, "the suite connects with a password"

    def connect() -> None:
        url = os.environ["DATABASE_URL"]  # a local holding a credential, as in a real failure
        conninfo = f"host=db password={database_password}"
        raise ConnectionError(f"cannot connect ({len(url)}, {len(conninfo)})")

    request = _request_with_a_bearer_token()
    html = ""
    try:
        connect()
    except ConnectionError:
        html = str(ExceptionReporter(request, *sys.exc_info()).get_traceback_html())
    credentials = [str(database_password), str(redis_url), os.environ["DATABASE_URL"]]
    secrets_shown = [s for s in [*credentials, TOKEN] if s in html]
    assert secrets_shown == []
    assert "DATABASE_URL" in html and "REDIS_URL" in html  # named, with the value hidden
