"""Real pages in a real browser: Playwright driving Debian's Chromium (issue 10).

``make test`` installs Chromium (``apt-get install chromium``) when it is missing; the
Playwright Python package comes with the dev dependencies and drives that binary, never a
browser it downloads. Set AGENTOPS_SCREENSHOTS=docs/screenshots to (re)write docs/pages.md's
screenshots while the tests run.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path(os.environ.get("AGENTOPS_CHROMIUM", "/usr/bin/chromium"))
FLAGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
PASSWORD = "browser-Test-pass-42"


# Per module, not per session: later tests must not run inside Playwright's loop.
@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from django.db import connections
    from playwright.sync_api import sync_playwright

    assert CHROMIUM.exists(), (
        f"{CHROMIUM} is missing: `make test` installs Debian's chromium (as root), or "
        "`sudo apt-get install chromium`"
    )
    # Playwright's sync API keeps an event loop on the test's thread, and Django refuses
    # database calls made while one runs. The test's own ORM calls between browser calls are
    # synchronous and safe: allow them, for the browser tests only (never in a subprocess).
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    # While a loop runs on a thread, Django (asgiref) keeps that thread's connections per
    # asyncio context rather than per thread, so the test's connection would depend on where
    # Playwright's greenlets stand. Plain per-thread connections here, as in every other test.
    connections.close_all()
    usual = getattr(connections, "_connections")  # noqa: B009 - private, put back below
    setattr(connections, "_connections", threading.local())  # noqa: B010
    try:
        with sync_playwright() as playwright:
            launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS)
            yield launched
            launched.close()
    finally:
        connections.close_all()
        setattr(connections, "_connections", usual)  # noqa: B010
        del os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"]


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    yield from _page(browser, {"width": 1280, "height": 900})


@pytest.fixture
def customer(browser: Any) -> Iterator[Any]:
    """A customer's browser: no session, a phone-sized window."""
    yield from _page(browser, {"width": 800, "height": 700})


def _page(browser: Any, viewport: dict[str, int]) -> Iterator[Any]:
    # Closed at the end, so no page keeps polling the app while the test database goes.
    context = browser.new_context(viewport=viewport)
    opened = context.new_page()
    opened.set_default_timeout(20_000)
    problems: list[str] = []
    opened.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    opened.on("pageerror", lambda e: problems.append(str(e)))
    yield opened
    context.close()
    # A CSP violation or a script error is a failure of the page, not noise.
    assert problems == [], problems


def operator(*groups: str) -> str:
    """A login in ``groups`` (``Operators`` when none is named)."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    name = f"ops-{uuid.uuid4().hex[:8]}"
    made = get_user_model().objects.create_user(username=name, password=PASSWORD)
    for group in groups or ("Operators",):
        made.groups.add(Group.objects.get(name=group))
    return name


def stranger() -> str:
    """A login with no permission at all."""
    from django.contrib.auth import get_user_model

    name = f"nobody-{uuid.uuid4().hex[:8]}"
    get_user_model().objects.create_user(username=name, password=PASSWORD)
    return name


def log_in(page: Any, base: str, username: str) -> None:
    page.goto(f"{base}/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/")


PHONE = {"width": 390, "height": 844}


def screenshot(page: Any, name: str, *, phone: bool = False) -> None:
    """Write ``<name>.png`` where AGENTOPS_SCREENSHOTS says; with ``phone``, also
    ``<name>-phone.png`` at a phone's width (the page reloaded there, then put back)."""
    folder = os.environ.get("AGENTOPS_SCREENSHOTS")
    if not folder:
        return
    Path(folder).mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(Path(folder) / f"{name}.png"), full_page=True)
    if phone:
        desktop = page.viewport_size
        page.set_viewport_size(PHONE)
        page.reload()
        page.wait_for_load_state("networkidle")
        page.screenshot(path=str(Path(folder) / f"{name}-phone.png"), full_page=True)
        page.set_viewport_size(desktop)
        page.reload()


# What the browser tests refuse: serious and critical violations, by axe-core's own impact.
REFUSED_IMPACTS = ("serious", "critical")


def accessibility_problems(page: Any) -> list[str]:
    """axe-core's serious and critical violations on the page as it stands, one line each
    (rule, impact, how many nodes, the first nodes' selectors)."""
    from axe_playwright_python.sync_playwright import Axe

    found = Axe().run(page).response["violations"]
    return [
        f"{v['id']} ({v['impact']}) on {len(v['nodes'])}: "
        + ", ".join(" ".join(n["target"]) for n in v["nodes"][:3])
        for v in found
        if v["impact"] in REFUSED_IMPACTS
    ]


@pytest.fixture(autouse=True)
def _clean_connection() -> Iterator[None]:
    """Each test starts on a connection outside any transaction, and leaves none open."""
    from django.db import connection, connections

    assert not connection.in_atomic_block, "a transaction was left open before this test"
    yield
    connections.close_all()
