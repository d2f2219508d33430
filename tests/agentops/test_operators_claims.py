"""Operators coordinating on a task (issue 38): claiming, releasing, taking over and notes,
each recorded with its actor and told in the task's history; a colleague warned before acting
on a task someone else holds, and still able to act (a claim is no lock)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import IntegrityError, transaction

from agentops.models import NOTE_MAX, CoordinationKind, TaskClaim, TaskCoordination
from agentops.operators.claims import (
    CoordinationRefused,
    hold_of,
    task_claim,
    task_note,
    task_release,
    task_take_over,
)
from journal.models import Entry, EntryKind, Task
from tests.agentops.test_operators import client_for, redis, unknown_step, user  # noqa: F401

pytestmark = pytest.mark.usefixtures("committed", "redis")


def kinds_of(task_id: Any) -> list[tuple[str, str, str]]:
    return [
        (c.kind, c.actor, c.was)
        for c in TaskCoordination.objects.filter(task_id=task_id).order_by("at", "id")
    ]


def test_claim_release_and_take_over_are_recorded_with_their_actor() -> None:
    task = unknown_step(flagged=True).task
    assert task_claim(task_id=task.pk, actor="ada") is True
    assert task_claim(task_id=task.pk, actor="ada") is False  # held already: nothing recorded
    hold = hold_of(task_id=task.pk)
    assert hold is not None and hold.holder == "ada"
    with pytest.raises(CoordinationRefused, match="ada holds this task already"):
        task_claim(task_id=task.pk, actor="bob")
    with pytest.raises(CoordinationRefused, match="only its holder releases it"):
        task_release(task_id=task.pk, actor="bob")
    # A take-over names whom it takes from: a holder changed since is not overridden blindly.
    with pytest.raises(CoordinationRefused, match="ada holds this task now, not cy"):
        task_take_over(task_id=task.pk, actor="bob", holder="cy")
    task_take_over(task_id=task.pk, actor="bob", holder="ada")
    assert hold_of(task_id=task.pk).holder == "bob"  # type: ignore[union-attr]
    task_release(task_id=task.pk, actor="bob")
    assert hold_of(task_id=task.pk) is None
    with pytest.raises(CoordinationRefused, match="nobody holds this task"):
        task_release(task_id=task.pk, actor="bob")
    assert kinds_of(task.pk) == [
        ("claimed", "ada", ""),
        ("taken_over", "bob", "ada"),
        ("released", "bob", ""),
    ]
    assert TaskClaim.objects.filter(task_id=task.pk).count() == 1  # one row per task, kept


def test_a_note_is_recorded_with_its_actor_and_refused_when_empty_or_with_a_control_character() -> (
    None
):
    task = unknown_step(flagged=True).task
    note = task_note(task_id=task.pk, actor="ada", text="  Called the bank.\r\nWaiting.\t ")
    assert (note.kind, note.actor, note.text) == ("noted", "ada", "Called the bank.\r\nWaiting.")
    for text, said in [
        ("", "needs some text"),
        ("   \n ", "needs some text"),
        ("bad\x00byte", "control character"),
        ("bell\x07", "control character"),
        ("x" * (NOTE_MAX + 1), f"at most {NOTE_MAX} characters"),
    ]:
        with pytest.raises(CoordinationRefused, match=said):
            task_note(task_id=task.pk, actor="ada", text=text)
    assert TaskCoordination.objects.filter(task_id=task.pk).count() == 1
    # The database keeps a note's text too: no empty note, whoever inserts it.
    with pytest.raises(IntegrityError), transaction.atomic():
        TaskCoordination.objects.create(task_id=task.pk, kind=CoordinationKind.NOTED, actor="x")


def test_the_pages_claim_take_over_and_release_and_the_history_tells_it() -> None:
    ada, bob = user("Operators"), user("Operators")
    a, b = client_for(ada), client_for(bob)
    task_id = unknown_step(flagged=True).task_id
    url = f"/tasks/{task_id}"
    assert "Nobody holds this task." in a.get(url).content.decode()
    assert a.post(f"{url}/hold", {"do": "claim"}).status_code == 302
    page = b.get(url).content.decode()
    assert f"<b>{ada.username}</b> holds this task, claimed" in page
    assert f"Take it over from {ada.username}" in page
    listed = b.get("/").content.decode()
    assert f"held by <b>{ada.username}</b>" in listed
    refused = b.post(f"{url}/hold", {"do": "release"}, follow=True).content.decode()
    assert "Not done:" in refused and "only its holder releases it" in refused
    b.post(f"{url}/hold", {"do": "take_over", "holder": ada.username})
    assert hold_of(task_id=task_id).holder == bob.username  # type: ignore[union-attr]
    b.post(f"{url}/hold", {"do": "release"})
    b.post(f"{url}/notes", {"text": "Stripe shows no charge."})
    story = a.get(url).content.decode()
    story = story[story.index('id="story"') :]
    for said in (
        f"Claimed the task</td>\n          <td><b>{ada.username}</b>",
        f"Took the task over from {ada.username}</td>\n          <td><b>{bob.username}</b>",
        f"Released the task</td>\n          <td><b>{bob.username}</b>",
        f"Note: “Stripe shows no charge.”</td>\n          <td><b>{bob.username}</b>",
    ):
        assert said in story
    assert story.index("Claimed the task") < story.index("Took the task over")
    assert story.index("Took the task over") < story.index("Released the task")


def test_a_second_operators_confirmation_warns_and_the_action_still_works() -> None:
    ada, bob = user("Operators"), user("Operators")
    task_id = unknown_step(flagged=True).task_id
    task_claim(task_id=task_id, actor=ada.username)
    b = client_for(bob)
    confirm = b.get(f"/tasks/{task_id}/resume").content.decode()
    assert f"{ada.username} holds this task (claimed less than a minute ago)." in confirm
    assert "a coordination aid, not a lock" in confirm
    swapped = b.get(f"/tasks/{task_id}/resume", HTTP_HX_REQUEST="true").content.decode()
    assert f"{ada.username} holds this task (claimed" in swapped  # in the page's own slot too
    # Ada herself is not warned about her own claim.
    assert (
        "holds this task (claimed"
        not in client_for(ada).get(f"/tasks/{task_id}/resume").content.decode()
    )
    done = b.post(f"/tasks/{task_id}/resume", {"reason": "checked at the provider"})
    assert done.status_code == 302
    assert Task.objects.get(pk=task_id).status == "runnable"
    action = Entry.objects.get(task_id=task_id, kind=EntryKind.OPERATOR_ACTION)
    assert action.actor == bob.username
    assert hold_of(task_id=task_id).holder == ada.username  # type: ignore[union-attr]


def test_notes_are_escaped_newest_last_and_a_refused_note_says_why() -> None:
    c = client_for(user("Operators"))
    task_id = unknown_step(flagged=True).task_id
    evil = '<script>alert(1)</script>"><img src=x onerror=alert(2)>'
    assert c.post(f"/tasks/{task_id}/notes", {"text": "first"}).status_code == 302
    assert c.post(f"/tasks/{task_id}/notes", {"text": evil}).status_code == 302
    html = c.get(f"/tasks/{task_id}").content.decode()
    assert evil not in html and "<img src=x" not in html and "<script>alert" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    notes = html[html.index('id="notes"') :]
    assert notes.index("first") < notes.index("&lt;script&gt;")  # newest last
    empty = c.post(f"/tasks/{task_id}/notes", {"text": "  "})
    assert empty.status_code == 400 and "A note needs some text" in empty.content.decode()
    nul = c.post(f"/tasks/{task_id}/notes", {"text": "see\x00this"})
    body = nul.content.decode()
    assert nul.status_code == 400 and "control character" in body and "seethis</textarea>" in body
    assert TaskCoordination.objects.filter(task_id=task_id).count() == 2


def test_read_only_operators_see_the_holder_but_cannot_claim_or_note() -> None:
    viewer = client_for(user("Operators (read-only)"))
    task_id = unknown_step(flagged=True).task_id
    task_claim(task_id=task_id, actor="ada")
    page = viewer.get(f"/tasks/{task_id}").content.decode()
    assert "<b>ada</b> holds this task" in page
    assert "Take it over" not in page and "Leave the note" not in page
    assert viewer.post(f"/tasks/{task_id}/hold", {"do": "claim"}).status_code == 403
    assert viewer.post(f"/tasks/{task_id}/notes", {"text": "hi"}).status_code == 403
    assert viewer.get(f"/tasks/{task_id}/hold").status_code in (403, 405)


def test_claims_and_notes_are_csrf_protected() -> None:
    strict = client_for(user("Operators"), enforce_csrf_checks=True)
    task_id = unknown_step(flagged=True).task_id
    assert strict.post(f"/tasks/{task_id}/hold", {"do": "claim"}).status_code == 403
    assert strict.post(f"/tasks/{task_id}/notes", {"text": "hi"}).status_code == 403
    assert hold_of(task_id=task_id) is None
    assert not TaskCoordination.objects.filter(task_id=task_id).exists()
