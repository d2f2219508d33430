"""The operators' search takes any text and never answers 500 (issue 15).

PostgreSQL refuses a NUL in text and jsonb, and psycopg cannot send a lone surrogate: both
reached the database from ``?q=`` and answered 500. Whatever is typed, the list answers 200,
and what cannot be in the journal matches nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote

import pytest
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentops.operators import selectors
from tests.agentops.test_operators import client_for, renewal, user
from tests.agentops.workers import quiet_world

pytestmark = pytest.mark.usefixtures("committed")

# Percent-encoded as they arrive in a URL or a form; Django decodes them, invalid UTF-8 as
# U+FFFD.
NASTY = {
    "nul": "%00",
    "nul-inside": "INV-%00-1",
    "surrogate-as-utf8": "%ED%A0%80",
    "overlong-nul": "%C0%80",
    "invalid-utf8": "%FF%FE",
    "10k-chars": "a" * 10_000,
    "10k-key": "ao:" + "x" * 10_000,
    "sql": quote("' OR 1=1 --"),
    "uuid-then-nul": f"{uuid.uuid4()}%00",
    "nul-in-uuid": str(uuid.uuid4()).replace("-", "%00", 1),
    "braced-uuid": quote("{" + str(uuid.uuid4()) + "}"),
    "key-with-nul": "ao:%00",
    "like-wildcards": "%25",
    "underscore": "_",
    "both-wildcards": "%25_%25",
    "control-chars": "%01%08%0B%1F%7F%C2%85",
    "noncharacters": "%EF%BF%BF%F4%8F%BF%BF",
    "bidi-combining-emoji": "%E2%80%AE%CC%81%F0%9F%98%80",
    "backslashes-and-quotes": quote('\\"\\u0000{}'),
    "json": quote('{"invoice": "x"}'),
    "escaped-json-nul": quote('"\\u0000"'),
}

HTMX = {"HX-Request": "true"}


@pytest.fixture
def redis() -> Iterator[Any]:
    connection_ = quiet_world()
    yield connection_
    connection_.flushdb()


def _list(c: Client, q: str) -> Any:
    return c.get(f"/?q={q}")


def _filtered(c: Client, q: str) -> Any:
    return c.get(f"/?state=unknown&q={q}&page=2")


def _poll(c: Client, q: str) -> Any:
    return c.get(f"/?q={q}&fp=stale", headers=HTMX)


def _bulk_htmx(c: Client, q: str) -> Any:
    body = f"all=matching&q={q}"
    return c.post("/tasks/reconcile", body, "application/x-www-form-urlencoded", headers=HTMX)


def _bulk_without_javascript(c: Client, q: str) -> Any:
    body = f"all=matching&confirmed=1&q={q}"
    return c.post("/tasks/reconcile", body, "application/x-www-form-urlencoded", follow=True)


@pytest.mark.parametrize("ask", [_list, _filtered, _poll, _bulk_htmx, _bulk_without_javascript])
def test_any_search_answers_200_and_matches_nothing_it_should_not(
    ask: Callable[[Client, str], Any], redis: Any
) -> None:
    c = client_for(user("Operators"), raise_request_exception=False)
    sentinel = renewal()  # the newest task: a search matching everything would list it
    wrong: dict[str, Any] = {}
    for name, q in NASTY.items():
        response = ask(c, q)
        if response.status_code != 200:
            wrong[name] = response.status_code
        elif str(sentinel.pk) in response.content.decode():
            wrong[name] = "matched an unrelated task"
    assert not wrong, "; ".join(f"{name}: {why}" for name, why in wrong.items())


def test_a_search_still_finds_what_it_names() -> None:
    c = client_for(user("Operators (read-only)"))
    task = renewal()
    inv = task.refs["invoice"]
    for q in (inv, quote(f"  {inv.lower()}\t"), str(task.pk), quote("{" + str(task.pk) + "}")):
        assert str(task.pk) in _list(c, q).content.decode(), q
    # The same text with a NUL in it cannot be in the journal: nothing, and no error.
    response = _list(c, f"{inv}%00")
    assert response.status_code == 200 and str(task.pk) not in response.content.decode()


# Any text at all, lone surrogates included (no URL can carry those: they are for the
# selectors, which other code calls with whatever it has).
ANY_TEXT = st.text(st.characters(exclude_categories=()), max_size=300)


BOUNDED = settings(
    max_examples=60,
    deadline=None,
    print_blob=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@BOUNDED
@given(q=ANY_TEXT)
def test_the_selectors_take_any_text(q: str) -> None:
    assert selectors.task_list(query=selectors.ListQuery(q=q)).page.paginator.count >= 0
    unknown = selectors.ListQuery(state="unknown", q=q)
    assert isinstance(list(selectors.tasks_matching(query=unknown)), list)


def test_the_list_takes_any_bytes_in_its_url() -> None:
    c = client_for(user("Operators (read-only)"))

    @BOUNDED
    @given(q=st.binary(max_size=300) | ANY_TEXT.map(lambda s: s.encode("utf-8", "surrogatepass")))
    def ask(q: bytes) -> None:
        assert _list(c, quote(q)).status_code == 200, q

    ask()
