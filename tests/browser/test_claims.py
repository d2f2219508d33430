"""Two operators on one task, in Chromium (issue 38): Ada claims it, Bob opens it and sees
that Ada holds it, and his confirmation warns him before he acts — and still lets him."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from journal.models import Entry, EntryKind, Task
from tests.browser.conftest import _page, accessibility_problems, log_in, operator
from tests.browser.test_decisions import unknown_charge

pytestmark = pytest.mark.usefixtures("committed")


@pytest.fixture
def colleague(browser: Any) -> Iterator[Any]:
    """A second operator's browser, with a session of its own."""
    yield from _page(browser, {"width": 1280, "height": 900})


def test_bob_sees_that_ada_holds_the_task_and_is_warned_before_acting(
    app_server: str, page: Any, colleague: Any
) -> None:
    task = unknown_charge().task
    ada, bob = operator(), operator()
    log_in(page, app_server, ada)
    page.goto(f"{app_server}/tasks/{task.pk}")
    page.get_by_role("button", name="Claim this task").click()
    page.wait_for_selector(f"#hold >> text={ada} holds this task (you)")
    page.fill("#note-text", "Calling the bank <b>now</b>.")
    page.get_by_role("button", name="Leave the note").click()
    page.wait_for_selector("#notes >> text=Calling the bank <b>now</b>.")

    log_in(colleague, app_server, bob)
    colleague.goto(f"{app_server}/tasks/{task.pk}")
    held = colleague.locator("#hold .holder-now").inner_text()
    assert held.startswith(f"{ada} holds this task, claimed"), held
    assert colleague.get_by_role("button", name=f"Take it over from {ada}").is_visible()
    assert accessibility_problems(colleague) == []

    # In the page (htmx swaps the confirmation in), then confirmed: the claim is no lock.
    colleague.locator("#task-head a.action-resume").click()
    warning = colleague.locator("#task-confirm .held-by-other")
    warning.wait_for()
    said = warning.inner_text()
    assert f"{ada} holds this task (claimed" in said and "not a lock" in said, said
    assert accessibility_problems(colleague) == []
    colleague.fill("#task-confirm textarea[name=reason]", "the bank confirmed it")
    colleague.locator("#task-confirm button[type=submit]").click()
    colleague.wait_for_selector(
        "#task-body .badge.status-runnable, #task-body .badge.status-running"
    )
    action = Entry.objects.get(task_id=task.pk, kind=EntryKind.OPERATOR_ACTION)
    assert action.actor == bob
    assert Task.objects.get(pk=task.pk).status != "needs_human"

    # Without JavaScript's swap, the confirmation page of its own says the same.
    colleague.goto(f"{app_server}/tasks/{task.pk}/cancel")
    assert f"{ada} holds this task (claimed" in colleague.locator("form.confirm").inner_text()
    assert accessibility_problems(colleague) == []
