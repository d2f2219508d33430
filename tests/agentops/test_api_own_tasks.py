"""Each program sees its own tasks (issue 38): an API client reads and acts on only the tasks
it started (over the API or MCP), unless its token carries ``tasks:read:all``,
``tasks:approve:all`` or ``tasks:operate:all``; another client's task is 404, as one that
does not exist, and is not listed. Over MCP, ``effects_for`` and ``check_effect`` tell a
client only of its own tasks. Real PostgreSQL through Django's test client, and the MCP
server in process."""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Iterator
from functools import partial
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client, override_settings

from agentops.api.auth import api_client_create
from agentops.effects import task_start
from agentops.models import ApiClient
from journal.models import Approval, Entry, Step, Task
from tests.agentops.mcp_support import Session, data, in_process, run, text
from tests.agentops.test_business_effects import renewal_refs, trip_refs
from tests.agentops.test_business_effects import run as advance
from tests.agentops.workers import quiet_world
from tests.journal.support import invoice

pytestmark = pytest.mark.usefixtures("committed", "redis")

OWN = ["tasks:start", "tasks:read", "tasks:approve", "tasks:operate", "mcp"]
HOLD_FIRST: list[dict[str, Any]] = [
    {"tool": "hold_flight", "hold": True},
    {"tool": "book_hotel"},
    {"tool": "charge_customer"},
    {"tool": "send_email"},
]


@pytest.fixture
def redis() -> Iterator[Any]:
    """Tasks started here are rung for on Redis; no worker runs them."""
    connection = quiet_world()
    yield connection
    connection.flushdb()


def client(*scopes: str) -> tuple[ApiClient, Client]:
    made, token = api_client_create(name=f"prog-{uuid.uuid4().hex[:8]}", scopes=list(scopes or OWN))
    return made, Client(HTTP_AUTHORIZATION=f"Bearer {token}")


def post(http: Client, path: str, body: Any) -> Any:
    return http.post(path, json.dumps(body), content_type="application/json")


def held_trip(actor: str) -> Task:
    """A trip started by ``actor``, held for approval before its first step (nothing sent)."""
    task = task_start(
        kind="trip", goal="Lisbon", refs=trip_refs(invoice()), plan=HOLD_FIRST, actor=actor
    )
    advance(task)
    assert Task.objects.get(pk=task.pk).status == "awaiting_approval"
    return task


def test_another_clients_task_is_404_everywhere_and_its_held_charge_stays_held() -> None:
    a, as_a = client()
    b, as_b = client()
    task = held_trip(a.actor)
    held = as_a.get(f"/api/v1/tasks/{task.pk}").json()["held"]
    right = {"approval_id": held["approval_id"], "digest": held["digest"]}
    nowhere = as_b.get(f"/api/v1/tasks/{uuid.uuid4()}")

    read = as_b.get(f"/api/v1/tasks/{task.pk}")
    assert read.status_code == 404 and read.json() == {"detail": f"no task {task.pk}"}
    assert nowhere.status_code == 404  # the same answer as a task that does not exist
    for action, body in [
        ("approve", right),
        ("reject", {"approval_id": held["approval_id"], "reason": "no"}),
        ("resume", {"reason": "go"}),
        ("cancel", {"reason": "stop"}),
        ("reconcile", {"reason": "look"}),
    ]:
        refused = post(as_b, f"/api/v1/tasks/{task.pk}/{action}", body)
        assert refused.status_code == 404, (action, refused.content)
        assert refused.json() == {"detail": f"no task {task.pk}"}
    assert Approval.objects.get(pk=held["approval_id"]).state == "pending"
    assert Task.objects.get(pk=task.pk).status == "awaiting_approval"
    assert not Entry.objects.filter(task=task, actor=b.actor).exists()

    # Not listed either, by its reference or without one; its own client lists it.
    inv = task.refs["invoice"]
    assert as_b.get("/api/v1/tasks", {"ref": inv}).json()["total"] == 0
    everything = as_b.get("/api/v1/tasks", {"per_page": "100"}).json()
    assert str(task.pk) not in [t["id"] for t in everything["items"]]
    mine = as_a.get("/api/v1/tasks", {"ref": inv}).json()
    assert [t["id"] for t in mine["items"]] == [str(task.pk)]

    # Its own client approves it.
    approved = post(as_a, f"/api/v1/tasks/{task.pk}/approve", right)
    assert approved.status_code == 200, approved.content
    assert Approval.objects.get(pk=held["approval_id"]).decided_by == a.actor


def test_the_all_scopes_reach_every_clients_task() -> None:
    a, _ = client()
    task = held_trip(a.actor)
    inv = task.refs["invoice"]
    _, reader = client("tasks:read:all")
    assert reader.get(f"/api/v1/tasks/{task.pk}").status_code == 200
    listed = reader.get("/api/v1/tasks", {"ref": inv}).json()
    assert [t["id"] for t in listed["items"]] == [str(task.pk)]
    # Reading every task is not acting on it.
    refused = post(reader, f"/api/v1/tasks/{task.pk}/resume", {"reason": "go"})
    assert refused.status_code == 403 and "tasks:operate" in refused.json()["detail"]

    # tasks:operate:all reaches it: the journal answers (it does not need a person), not 404.
    _, operator = client("tasks:operate:all")
    resumed = post(operator, f"/api/v1/tasks/{task.pk}/resume", {"reason": "go"})
    assert resumed.status_code == 409, resumed.content

    c, approver = client("tasks:approve:all")
    held = reader.get(f"/api/v1/tasks/{task.pk}").json()["held"]
    right = {"approval_id": held["approval_id"], "digest": held["digest"]}
    approved = post(approver, f"/api/v1/tasks/{task.pk}/approve", right)
    assert approved.status_code == 200, approved.content
    approval = Approval.objects.get(pk=held["approval_id"])
    assert approval.state == "approved" and approval.decided_by == c.actor


def test_a_task_is_its_clients_whether_started_over_the_api_or_mcp() -> None:
    a, as_a = client()
    _, as_b = client()
    inv = invoice()
    body = {"kind": "renewal", "goal": "Renew", "refs": renewal_refs(inv)}
    started = post(as_a, "/api/v1/tasks", body)
    assert started.status_code == 201, started.content
    over_mcp = task_start(
        kind="renewal", goal="renew", refs=renewal_refs(inv), actor=f"mcp:{a.name}"
    )
    mine = as_a.get("/api/v1/tasks", {"ref": inv}).json()
    assert {t["id"] for t in mine["items"]} == {started.json()["id"], str(over_mcp.pk)}
    assert as_a.get(f"/api/v1/tasks/{over_mcp.pk}").status_code == 200
    assert as_b.get(f"/api/v1/tasks/{started.json()['id']}").status_code == 404
    # A client's name alone, as another actor, is not its: "ops:<name>" is a person's.
    by_hand = task_start(
        kind="renewal", goal="renew", refs=renewal_refs(inv), actor=f"ops:{a.name}"
    )
    assert as_a.get(f"/api/v1/tasks/{by_hand.pk}").status_code == 404


def test_api_client_create_accepts_the_all_scopes() -> None:
    out, err = io.StringIO(), io.StringIO()
    name = f"prog-{uuid.uuid4().hex[:8]}"
    scopes = ["tasks:read:all", "tasks:approve:all", "tasks:operate:all"]
    args = [arg for scope in scopes for arg in ("--scope", scope)]
    call_command("api_client", "create", name, *args, stdout=out, stderr=err)
    assert sorted(ApiClient.objects.get(name=name).scopes) == sorted(scopes)


# --- Over MCP -----------------------------------------------------------------------------------


@pytest.fixture
def sandboxed(on_sandbox: dict[str, Any], clean_faults: None) -> Iterator[None]:
    with override_settings(**on_sandbox, TOOL_TIMEOUT_SECONDS=1.0, PLANNER="scripted"):
        yield


def test_over_mcp_effects_for_and_check_effect_tell_only_of_the_clients_own_tasks(
    sandboxed: None,
) -> None:
    a, _ = client("mcp")
    b, _ = client("mcp")
    c, _ = client("mcp", "tasks:read:all")
    inv = invoice()
    paid = task_start(kind="renewal", goal="renew", refs=renewal_refs(inv), actor=f"mcp:{a.name}")
    advance(paid)
    charge = Step.objects.get(task=paid, tool="charge_customer")
    assert charge.state == "done"
    secrets = [str(paid.pk), charge.key, charge.evidence["charge"]]

    async def ask(name: str) -> list[Any]:
        async with in_process(name) as mcp:
            session = Session(mcp)
            return [
                await session.call("effects_for", {"reference": inv}),
                await session.call("effects_for", {"reference": "ada@example.com"}),
                await session.call("check_effect", {"reference": charge.key}),
                await session.call("check_effect", {"reference": f"charge:{inv}"}),
            ]

    listed, by_email, by_key, by_object = run(partial(ask, b.name))
    assert data(listed)["count"] == 0 and data(listed)["effects"] == []
    assert str(paid.pk) not in json.dumps(data(by_email))
    for result in (by_key, by_object):
        said = data(result)
        # Not "nothing was done" (untrue), and nothing of the task: not its id, key or evidence.
        assert said["status"] == "unknown" and said["evidence"] in ({}, None)
        assert said["task"] is None and said["tool"] is None and said["at"] is None
        assert "tasks:read:all" in said["reason"]
    # Only what was asked is said back: the key, or the object.
    assert data(by_key)["reference"] == charge.key and data(by_key)["object"] is None
    assert data(by_object)["object"] == f"charge:{inv}" and data(by_object)["reference"] is None
    for result in (listed, by_email, by_object):
        shown = json.dumps(data(result)) + text(result)
        assert not [s for s in secrets if s in shown], shown

    for name in (a.name, c.name):  # its own client, and one that reads every task
        listed, _, by_key, by_object = run(partial(ask, name))
        assert [e["reference"] for e in data(listed)["effects"]][-1] == charge.key
        assert data(by_key)["status"] == data(by_object)["status"] == "done"
        assert data(by_key)["evidence"] == charge.evidence


# --- Bad input, clear errors ----------------------------------------------------------------------


def test_a_body_over_the_limit_is_413_in_the_apis_json_and_starts_nothing() -> None:
    made, http = client("tasks:start", "tasks:approve")
    inv = invoice()
    body = {"kind": "renewal", "goal": "x" * 5000, "refs": renewal_refs(inv)}
    task = task_start(kind="renewal", goal="renew", refs=renewal_refs(invoice()), actor=made.actor)
    with override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=1000):
        for path in ("/api/v1/tasks", f"/api/v1/tasks/{task.pk}/reject"):
            for key in (None, "big-1"):
                headers = {} if key is None else {"Idempotency-Key": key}
                answer = http.post(
                    path, json.dumps(body), content_type="application/json", headers=headers
                )
                assert answer.status_code == 413, (path, answer.content)
                assert answer["Content-Type"] == "application/json; charset=utf-8"
                detail = answer.json()["detail"]
                assert "larger than the 1000 bytes" in detail and "nothing was done" in detail
    assert not Task.objects.filter(refs__invoice=inv).exists()
    # The same key with a body within the limit is done (the refused one left no record).
    small = {"kind": "renewal", "goal": "renew", "refs": renewal_refs(inv)}
    started = http.post(
        "/api/v1/tasks",
        json.dumps(small),
        content_type="application/json",
        headers={"Idempotency-Key": "big-1"},
    )
    assert started.status_code == 201, started.content
