"""The support example end to end (examples/support): goodwill tasks run by the real runner,
in-process, against the example's own provider as a process of its own, with its faults.

One tool per cost class — a read, a cheap effect, a full effect and its undo — each shown
doing what its class promises when the provider misbehaves, and the kind's rules (once per
ticket, the money cap, the saga) holding whatever happens.
"""

from __future__ import annotations

import copy
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import django_rq
import pytest
from django.test import Client, override_settings

from agentops import effects
from agentops.api.auth import api_client_create
from agentops.api.services import once_effect_done
from agentops.effects import task_start
from agentops.operators.services import task_compensate
from agentops.runner import task_run
from devtools.sandboxes import SandboxHandle
from journal.keys import undo_key
from journal.models import Entry, EntryKind, Step, Task
from tests.agentops.test_operators import client_for, user

pytestmark = pytest.mark.usefixtures("committed")

# A read held this long is timed out by the tools (TOOL_TIMEOUT_SECONDS, 0.5 s below) with
# room to spare.
SLOW = 2.5

OVER = ("finished", "compensated", "cancelled", "needs_human", "awaiting_approval")


@pytest.fixture
def desk(support_sandbox: SandboxHandle) -> Iterator[SandboxHandle]:
    """The example's provider, its faults cleared, and the tools pointed at it; the runner's
    waits shortened (tasks run here, in-process, one run after another)."""
    support_sandbox.client.clear_faults()
    support_sandbox.client.config(key_lifetime=86400, locked_tickets=[])
    with override_settings(
        SUPPORT_API_BASE=support_sandbox.url,
        SUPPORT_KEY_LIFETIME_SECONDS=86400,
        TOOL_TIMEOUT_SECONDS=0.5,
        RECONCILE_SCHEDULE=(0.1,) * 6,
        TRANSIENT_RETRY_SCHEDULE=(0.1, 0.1),
        PLANNER="scripted",
    ):
        yield support_sandbox
    support_sandbox.client.clear_faults()
    django_rq.get_connection("default").flushdb()  # the runs' rings: no worker takes them here


def refs(**change: Any) -> dict[str, Any]:
    ticket = f"T-{uuid.uuid4().hex[:10]}"
    return {
        "ticket": ticket,
        "order": "ORD-1001",
        "email": "ada@example.com",
        "amount": 1500,
        "currency": "eur",
        **change,
    }


def run(task: Task, timeout: float = 30) -> Task:
    """Run the task as a worker would, again whenever it waits, until it is over."""
    deadline = time.monotonic() + timeout
    while True:
        task_run(task_id=task.pk)
        task = Task.objects.get(pk=task.pk)
        if task.status in OVER:
            return task
        assert time.monotonic() < deadline, f"task {task.pk} still {task.status}"
        time.sleep(0.05)


def goodwill(plan: list[dict[str, Any]] | None = None, **change: Any) -> Task:
    return run(
        task_start(kind="goodwill", goal="Sorry for the delay", refs=refs(**change), plan=plan)
    )


def calls(task: Task) -> list[tuple[str, str]]:
    return [(s.tool, s.state) for s in Step.objects.filter(task=task, kind="call").order_by("n")]


def step(task: Task, tool: str) -> Step:
    return Step.objects.filter(task=task, tool=tool, kind="call").order_by("n").last()  # type: ignore[return-value]


def credits(desk: SandboxHandle, ticket: str) -> list[dict[str, Any]]:
    """The credits the provider issued for a ticket (its ledger: what really happened)."""
    issued = desk.client.ledger(operation="credits.create")
    return [e for e in issued if e["params"]["ticket"] == ticket]


def test_the_example_is_found_the_django_way_and_passes_the_start_up_checks() -> None:
    assert "goodwill" in effects.kinds() and "goodwill" in effects.registry.playbooks
    tools = effects.tools()
    assert {t: tools[t].cost for t in ("look_up_order", "post_note", "issue_credit")} == {
        "look_up_order": effects.CostClass.READ,
        "post_note": effects.CostClass.CHEAP,
        "issue_credit": effects.CostClass.FULL,
    }
    declared = effects.registry.sandboxes["support"]
    assert (declared.module, declared.unless) == ("examples.support.sandbox", "SUPPORT_API_BASE")
    ours = ("goodwill", "look_up_order", "post_note", "issue_credit", "void_credit")
    with override_settings(SUPPORT_API_BASE="http://127.0.0.1:9"):  # configured, as in use
        assert [p for p in effects.declarations() if any(n in p.msg for n in ours)] == []


def test_a_goodwill_task_credits_the_ticket_once_then_tells_the_team(desk: SandboxHandle) -> None:
    task = goodwill()
    assert task.status == "finished", task.attention
    assert calls(task) == [
        ("look_up_order", "done"),
        ("issue_credit", "done"),
        ("post_note", "done"),
    ]
    credit, note = step(task, "issue_credit"), step(task, "post_note")
    [issued] = credits(desk, task.refs["ticket"])
    assert issued["key"] == credit.key and issued["object_id"] == credit.evidence["id"]
    assert issued["params"]["reference"] == credit.key  # our key on the credit: findable
    assert (credit.undo_tool, note.undo_tool) == ("void_credit", "")
    [posted] = desk.client.ledger(operation="notes.create", reference=task.refs["ticket"])
    assert posted["key"] == note.key
    assert credit.evidence["id"] in posted["params"]["text"]
    assert step(task, "look_up_order").evidence["total"] == 4900


def test_a_read_that_times_out_is_tried_again_within_its_limit_without_a_key(
    desk: SandboxHandle,
) -> None:
    # Well past the tools' 0.5 s: a runner held up on a busy machine still finds it timed out,
    # not the answer already there (the sandbox answers each on a thread of its own).
    desk.client.fault("orders.retrieve", "latency_before_effect", delay=SLOW, times=2)
    task = goodwill()
    assert task.status == "finished", task.attention
    read = step(task, "look_up_order")
    assert (read.state, read.attempts) == ("done", 3)
    assert not Entry.objects.filter(step=read, kind=EntryKind.LOOKUP).exists()
    timed_out = [f for f in desk.client.fault_log() if f["operation"] == "orders.retrieve"]
    assert [f["key"] for f in timed_out] == [None, None]  # a read carries no key


def test_a_read_that_keeps_timing_out_ends_not_done_never_unknown(desk: SandboxHandle) -> None:
    desk.client.fault("orders.retrieve", "latency_before_effect", delay=SLOW, times=None)
    task = goodwill()
    read = step(task, "look_up_order")
    assert (read.state, read.attempts) == ("not_done", 3)
    assert read.detail.startswith("the read did not complete")
    # The saga cannot go on without its order: nothing was credited, nobody was asked.
    assert task.status == "compensated" and calls(task) == [("look_up_order", "not_done")]
    assert credits(desk, task.refs["ticket"]) == []


def test_a_note_whose_reply_was_lost_is_sent_again_with_its_key_and_posted_once(
    desk: SandboxHandle,
) -> None:
    desk.client.fault("notes.create", "drop_after_effect")
    task = goodwill()
    assert task.status == "finished", task.attention
    note = step(task, "post_note")
    assert (note.state, note.attempts) == ("done", 2)
    assert not Entry.objects.filter(step=note, kind=EntryKind.LOOKUP).exists()  # never looked up
    posted = desk.client.ledger(operation="notes.create", reference=task.refs["ticket"])
    assert [p["key"] for p in posted] == [note.key]  # the channel holds one note
    [dropped] = [f for f in desk.client.fault_log() if f["operation"] == "notes.create"]
    assert dropped["key"] == note.key


def test_a_credit_whose_reply_was_lost_is_looked_up_and_settled_done_once(
    desk: SandboxHandle,
) -> None:
    desk.client.fault("credits.create", "drop_after_effect")
    task = goodwill()
    assert task.status == "finished", task.attention
    credit = step(task, "issue_credit")
    assert (credit.state, credit.attempts) == ("done", 1)  # found, not sent again
    [lookup] = Entry.objects.filter(step=credit, kind=EntryKind.LOOKUP)
    assert lookup.data["found"] is True
    [issued] = credits(desk, task.refs["ticket"])
    assert issued["object_id"] == credit.evidence["id"]


@pytest.mark.parametrize(
    "lie", ["empty_after_effect", "wrong_shape_after_effect", "html_after_effect"]
)
@pytest.mark.parametrize(
    ("operation", "tool"),
    [
        ("credits.create", "issue_credit"),
        ("notes.create", "post_note"),
        ("credits.void", "void_credit"),
    ],
)
def test_a_200_without_evidence_is_never_done_and_the_effect_happens_once(
    desk: SandboxHandle, operation: str, tool: str, lie: str
) -> None:
    """The provider acts, then answers 200 without the id (empty, another shape, a proxy's
    HTML): the step is unknown, never done with nothing to show; then found by its key
    (a credit, a void) or sent again with it (a note), and the effect is there once."""
    ticket = f"T-{uuid.uuid4().hex[:10]}"
    if tool == "void_credit":
        desk.client.config(locked_tickets=[ticket])  # the note is refused: the credit voided
    desk.client.fault(operation, lie)
    acted = step(goodwill(ticket=ticket), tool)
    assert acted.state == "done" and acted.evidence["id"]
    first = Entry.objects.filter(step=acted, kind=EntryKind.ATTEMPT_ENDED).first()
    assert first is not None and first.data["classified"] == "unknown"
    assert len(desk.client.ledger(operation=operation, key=acted.key)) == 1


def test_a_second_goodwill_for_the_ticket_is_refused_already_done_with_the_first_credit(
    desk: SandboxHandle,
) -> None:
    first = goodwill()
    first_credit = step(first, "issue_credit")
    again = dict(first.refs)
    # Through the API, nothing is started: it answers with the first credit's evidence.
    done = once_effect_done(kind="goodwill", goal="again", refs=again)
    assert done is not None and done.evidence == first_credit.evidence
    # A task started anyway is refused at the credit, told the first one's evidence.
    second = run(task_start(kind="goodwill", goal="Sorry, again", refs=again))
    refused = step(second, "issue_credit")
    assert (refused.state, refused.refusal) == ("not_done", "already_done")
    assert refused.detail.startswith("already done: issue_credit for")
    assert f"(id {first_credit.evidence['id']})" in refused.detail
    assert refused.outcome["first_evidence"] == first_credit.evidence
    # One credit for the ticket, and the second task's saga voided nothing of the first's.
    assert len(credits(desk, first.refs["ticket"])) == 1
    voided = [v["object_id"] for v in desk.client.ledger(operation="credits.void")]
    assert first_credit.evidence["id"] not in voided
    assert second.status == "compensated" and ("post_note", "done") not in calls(second)


def test_a_credit_above_the_kinds_cap_is_refused_and_nothing_is_sent(
    desk: SandboxHandle,
) -> None:
    task = goodwill(amount=5001)  # the cap is 50.00 a task
    refused = step(task, "issue_credit")
    assert (refused.state, refused.refusal) == ("not_done", "limit")
    assert "exceeds what this task may still" in refused.detail
    assert credits(desk, task.refs["ticket"]) == []
    assert task.status == "compensated"


def test_a_note_the_desk_refuses_voids_the_credit(desk: SandboxHandle) -> None:
    """The saga: no credit the team was not told of. The harness voids it, mapping the
    credit's evidence to the void's arguments (undo_args), keyed from the credit's step."""
    ticket = f"T-{uuid.uuid4().hex[:10]}"
    desk.client.config(locked_tickets=[ticket])
    task = goodwill(ticket=ticket)
    assert task.status == "compensated", task.attention
    assert calls(task) == [
        ("look_up_order", "done"),
        ("issue_credit", "done"),
        ("post_note", "not_done"),
        ("void_credit", "done"),
    ]
    credit, void = step(task, "issue_credit"), step(task, "void_credit")
    assert void.args == {"credit": credit.evidence["id"]}
    assert credit.offset_by_id == void.pk and void.key.startswith(undo_key(credit.key))
    [voided] = desk.client.ledger(operation="credits.void", key=void.key)
    assert voided["object_id"] == credit.evidence["id"]


def test_an_operator_compensates_a_held_goodwill_and_a_void_whose_reply_was_lost_is_found(
    desk: SandboxHandle,
) -> None:
    plan: list[dict[str, Any]] = [{"tool": "issue_credit"}, {"tool": "post_note", "hold": True}]
    task = goodwill(plan=plan)
    assert task.status == "awaiting_approval"
    desk.client.fault("credits.void", "drop_after_effect")
    task_compensate(task_id=task.pk, actor="ops@example.com", reason="wrong customer")
    task = run(task)
    assert task.status == "compensated", task.attention
    credit, void = step(task, "issue_credit"), step(task, "void_credit")
    assert void.state == "done" and credit.offset_by_id == void.pk
    assert Entry.objects.filter(step=void, kind=EntryKind.LOOKUP, data__found=True).exists()
    assert len(desk.client.ledger(operation="credits.void", key=void.key)) == 1
    assert desk.client.ledger(operation="notes.create", reference=task.refs["ticket"]) == []


def test_a_goodwill_task_is_started_from_the_new_task_page_and_the_api(
    desk: SandboxHandle,
) -> None:
    """Installed like any app: the operators' page offers its kind, its refs as fields, and
    the HTTP API starts it (then, the ticket credited, answers "already done")."""
    page = client_for(user("Operators"))
    form = page.get("/tasks/new?kind=goodwill").content.decode()
    for field in ("ticket", "order", "email", "amount", "currency", "hold"):
        assert f'name="{field}"' in form
    started = refs()
    answer = page.post("/tasks/new", {"kind": "goodwill", "goal": "Sorry", **started})
    task = Task.objects.get(refs__ticket=started["ticket"])
    assert answer.status_code == 302 and answer["Location"] == f"/tasks/{task.pk}"
    assert run(task).status == "finished"
    _, token = api_client_create(name=f"desk-{uuid.uuid4().hex[:8]}", scopes=["tasks:start"])
    body = {"kind": "goodwill", "goal": "Sorry", "refs": refs()}
    api = Client(HTTP_AUTHORIZATION=f"Bearer {token}")
    created = api.post("/api/v1/tasks", body, content_type="application/json")
    assert created.status_code == 201, created.content
    body["refs"] = started
    again = api.post("/api/v1/tasks", body, content_type="application/json")
    assert again.json()["already_done"]["evidence"] == step(task, "issue_credit").evidence


def test_the_readmes_tool_in_40_lines_works_as_written(
    desk: SandboxHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The README's complete app, run as it is written: its tool stands in for the example's
    own issue_credit (same name) while this test runs."""
    readme = (Path(__file__).parents[2] / "examples/support/README.md").read_text()
    found = re.search(r"## Your own tool in 40 lines.*?```python\n(.*?)```", readme, re.S)
    assert found is not None
    code = found.group(1)
    assert len(code.splitlines()) <= 40
    registry = effects.registry
    monkeypatch.setattr(
        registry, "tools", {n: t for n, t in registry.tools.items() if n != "issue_credit"}
    )
    monkeypatch.setattr(
        registry, "kinds", {n: k for n, k in registry.kinds.items() if n != "goodwill"}
    )
    for table in ("playbooks", "problems"):
        monkeypatch.setattr(registry, table, copy.copy(getattr(registry, table)))
    exec(compile(code, "examples/support/README.md", "exec"), {"__name__": "yourapp.effects"})  # noqa: S102
    assert registry.problems == []
    said = [str(p) for p in effects.declarations() if "credit" in p.msg]
    assert said == []
    ticket = f"T-{uuid.uuid4().hex[:10]}"
    asked = refs(ticket=ticket, customer="ada@example.com")
    del asked["email"]
    first = run(task_start(kind="credit", goal="Sorry", refs=asked))
    assert first.status == "finished" and calls(first) == [("issue_credit", "done")]
    again = run(task_start(kind="credit", goal="Sorry again", refs=asked))
    assert step(again, "issue_credit").refusal == "already_done"
    first_credit = step(first, "issue_credit").evidence["id"]
    told = Step.objects.get(task=again, kind="finish").detail
    assert (
        again.status == "finished"
        and f"already done: issue_credit for {ticket} (id {first_credit})" in told
    )
    assert len(credits(desk, ticket)) == 1


def test_the_docs_show_the_same_tested_40_lines() -> None:
    root = Path(__file__).parents[2]
    pattern = r"## Your own tool in 40 lines.*?```python\n(.*?)```"
    ours = re.search(pattern, (root / "examples/support/README.md").read_text(), re.S)
    main = re.search(pattern, (root / "docs/your-own/tools-and-kinds.md").read_text(), re.S)
    assert ours is not None and main is not None
    assert main.group(1) == ours.group(1)
