"""The HTTP API for other programs (issue 17): tokens and scopes, Idempotency-Key, the
already-done answer, the operators' actions recorded under the client's name, the rate
limit and the OpenAPI schema. Real PostgreSQL through Django's test client; the renewal
that pays an invoice runs in-process against the sandbox providers."""

from __future__ import annotations

import io
import json
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import ProgrammingError, connections, transaction
from django.test import Client, override_settings
from openapi_spec_validator import validate

from agentops.api.auth import api_client_create, api_client_revoke
from agentops.api.services import task_start_unless_done
from agentops.effects import task_start
from agentops.models import ApiClient, IdempotencyKey
from journal.models import Approval, Entry, EntryKind, Step, Task
from tests.agentops.test_business_effects import renewal_refs, run, trip_refs
from tests.agentops.workers import quiet_world
from tests.journal.support import invoice

pytestmark = pytest.mark.usefixtures("committed", "redis")

# What the start endpoint calls: the tests hold it, or make it die, half-way.
START = "agentops.api.views.task_start_unless_done"
ALL_SCOPES = ["tasks:start", "tasks:read", "tasks:approve", "tasks:operate"]


@pytest.fixture
def redis() -> Iterator[Any]:
    """Tasks started here are rung for on Redis; no worker runs them."""
    connection = quiet_world()
    yield connection
    connection.flushdb()


def api_client(*scopes: str) -> tuple[ApiClient, Client]:
    """A client of the API with these scopes (all of them without any), and Django's test
    client sending its token."""
    made, token = api_client_create(
        name=f"prog-{uuid.uuid4().hex[:8]}", scopes=list(scopes or ALL_SCOPES)
    )
    return made, Client(HTTP_AUTHORIZATION=f"Bearer {token}")


def post(http: Client, path: str, body: Any, key: str | None = None) -> Any:
    headers = {} if key is None else {"Idempotency-Key": key}
    return http.post(path, json.dumps(body), content_type="application/json", headers=headers)


def start_body(inv: str, **change: Any) -> dict[str, Any]:
    return {"kind": "renewal", "goal": "Renew Ada's plan", "refs": renewal_refs(inv), **change}


def tasks_of(inv: str) -> list[Task]:
    return list(Task.objects.filter(refs__invoice=inv))


# --- Idempotency-Key -------------------------------------------------------------------------


def test_the_same_key_twice_starts_one_task_and_replays_the_first_answer() -> None:
    made, http = api_client("tasks:start")
    inv, key = invoice(), str(uuid.uuid4())
    first = post(http, "/api/v1/tasks", start_body(inv), key=key)
    assert first.status_code == 201, first.content
    assert first.json()["status"] == "runnable" and first.json()["refs"]["invoice"] == inv
    assert "Idempotent-Replayed" not in first
    # The retry's JSON written otherwise (its keys in another order) is the same request.
    again = http.post(
        "/api/v1/tasks",
        json.dumps(dict(reversed(list(start_body(inv).items()))), indent=2),
        content_type="application/json",
        headers={"Idempotency-Key": f'"{key}"'},  # as a Structured Field string
    )
    assert again.status_code == 201
    assert again.content == first.content
    assert again["Idempotent-Replayed"] == "true"
    [task] = tasks_of(inv)
    created = Entry.objects.get(task=task, kind=EntryKind.TASK_CREATED)
    assert created.actor == f"api:{made.name}"
    row = IdempotencyKey.objects.get(client=made, key=key)
    assert row.state == "completed" and row.response_status == 201


def test_the_same_key_with_another_body_is_422_and_does_nothing() -> None:
    _, http = api_client("tasks:start")
    inv, key = invoice(), str(uuid.uuid4())
    assert post(http, "/api/v1/tasks", start_body(inv), key=key).status_code == 201
    other = post(http, "/api/v1/tasks", start_body(inv, goal="Renew twice"), key=key)
    assert other.status_code == 422
    assert "was used for another request" in other.json()["detail"]
    assert len(tasks_of(inv)) == 1
    # Another client's same key is its own.
    _, stranger = api_client("tasks:start")
    assert post(stranger, "/api/v1/tasks", start_body(invoice()), key=key).status_code == 201


def test_a_key_whose_first_request_is_still_being_answered_is_409(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made, http = api_client("tasks:start")
    inv, key = invoice(), str(uuid.uuid4())
    inside, release = threading.Event(), threading.Event()

    def slow(**kwargs: Any) -> Any:
        inside.set()
        assert release.wait(30)
        return task_start_unless_done(**kwargs)

    monkeypatch.setattr(START, slow)
    answers: list[Any] = []

    def first() -> None:
        try:
            own = Client(HTTP_AUTHORIZATION=http.defaults["HTTP_AUTHORIZATION"])
            answers.append(post(own, "/api/v1/tasks", start_body(inv), key=key))
        finally:
            connections.close_all()

    thread = threading.Thread(target=first)
    thread.start()
    try:
        assert inside.wait(30), "the first request never reached the work"
        meanwhile = post(http, "/api/v1/tasks", start_body(inv), key=key)
        assert meanwhile.status_code == 409
        assert "still being answered" in meanwhile.json()["detail"]
    finally:
        release.set()
        thread.join(30)
    [done] = answers
    assert done.status_code == 201
    later = post(http, "/api/v1/tasks", start_body(inv), key=key)
    assert later.status_code == 201 and later.content == done.content
    assert len(tasks_of(inv)) == 1


def test_a_request_that_died_half_way_is_done_by_the_next_with_its_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The work and the stored answer commit together: a request that failed left no task
    and no answer, and its retry does the work once."""
    _, http = api_client("tasks:start")
    inv, key = invoice(), str(uuid.uuid4())

    def dies(**kwargs: Any) -> Any:
        task_start_unless_done(**kwargs)  # recorded, then the request dies before it answers
        raise RuntimeError("the worker process was killed")

    monkeypatch.setattr(START, dies)
    with pytest.raises(RuntimeError):
        post(http, "/api/v1/tasks", start_body(inv), key=key)
    assert tasks_of(inv) == []
    monkeypatch.setattr(START, task_start_unless_done)
    assert post(http, "/api/v1/tasks", start_body(inv), key=key).status_code == 201
    assert len(tasks_of(inv)) == 1


def test_a_post_without_a_key_is_done_each_time_and_a_bad_key_is_400() -> None:
    _, http = api_client("tasks:start")
    inv = invoice()
    assert post(http, "/api/v1/tasks", start_body(inv)).status_code == 201
    assert post(http, "/api/v1/tasks", start_body(inv)).status_code == 201
    assert len(tasks_of(inv)) == 2
    bad = post(http, "/api/v1/tasks", start_body(invoice()), key="x" * 256)
    assert bad.status_code == 400 and "Idempotency-Key" in bad.json()["detail"]


def test_an_expired_key_starts_afresh() -> None:
    _, http = api_client("tasks:start")
    inv, key = invoice(), str(uuid.uuid4())
    with override_settings(API_IDEMPOTENCY_TTL_SECONDS=0):
        assert post(http, "/api/v1/tasks", start_body(inv), key=key).status_code == 201
        again = post(http, "/api/v1/tasks", start_body(inv, goal="another"), key=key)
    assert again.status_code == 201 and "Idempotent-Replayed" not in again
    assert len(tasks_of(inv)) == 2


# --- Starting and reading ----------------------------------------------------------------------


def test_refused_refs_are_422_with_every_problem_and_nothing_is_recorded() -> None:
    _, http = api_client("tasks:start")
    inv = invoice()
    refs = {"invoice": inv, "amount": "49.00", "email": "not an address"}
    refused = post(http, "/api/v1/tasks", {"kind": "renewal", "goal": "x", "refs": refs}, "k1")
    assert refused.status_code == 422
    problems = refused.json()["problems"]
    assert any(p.startswith("refs.amount:") for p in problems)
    assert any(p.startswith("refs.email:") for p in problems)
    assert tasks_of(inv) == []
    unknown = post(http, "/api/v1/tasks", {"kind": "refund", "goal": "x", "refs": {}})
    assert unknown.status_code == 422 and "unknown task kind" in unknown.json()["problems"][0]


@pytest.fixture
def sandboxed(on_sandbox: dict[str, Any], clean_faults: None) -> Iterator[None]:
    with override_settings(**on_sandbox, TOOL_TIMEOUT_SECONDS=1.0, PLANNER="scripted"):
        yield


def test_a_task_for_a_paid_invoice_answers_with_the_charges_evidence_and_starts_nothing(
    sandboxed: None,
) -> None:
    inv = invoice()
    made, http = api_client("tasks:start", "tasks:read")
    paid = task_start(kind="renewal", goal="renew", refs=renewal_refs(inv), actor=made.actor)
    run(paid)
    charge = Step.objects.get(task=paid, tool="charge_customer")
    assert charge.state == "done"

    # Asked again, in other words and another spelling of the invoice: told, not started.
    answer = post(http, "/api/v1/tasks", start_body(inv.lower(), goal="Charge it again"), "k")
    assert answer.status_code == 200, answer.content
    done = answer.json()["already_done"]
    assert done["tool"] == "charge_customer" and done["object"] == f"charge:{inv}"
    assert done["evidence"] == charge.evidence and done["evidence"]["charge"].startswith("ch_")
    assert done["step_key"] == charge.key and done["task_id"] == str(paid.pk)
    assert done["settled_at"] is not None
    assert Task.objects.filter(refs__invoice__iexact=inv).count() == 1

    # What the first task did, as the API shows it.
    shown = http.get(f"/api/v1/tasks/{paid.pk}").json()
    assert shown["status"] == "finished" and shown["summary"]
    assert [(s["tool"], s["state"]) for s in shown["steps"]] == [
        ("charge_customer", "done"),
        ("send_email", "done"),
    ]
    first = shown["steps"][0]
    assert first["key"] == charge.key and first["args"] == charge.args
    assert first["evidence"] == charge.evidence and first["object"] == f"charge:{inv}"
    assert first["attempts"] == 1 and first["reason"] == ""

    # Found by its invoice, and by the object a step acted on.
    for ref in (inv, f"charge:{inv}"):
        listed = http.get("/api/v1/tasks", {"ref": ref}).json()
        assert [t["id"] for t in listed["items"]] == [str(paid.pk)], ref


def test_a_renewal_whose_charge_is_not_done_is_started() -> None:
    inv = invoice()
    task_start(kind="renewal", goal="renew", refs=renewal_refs(inv))  # nothing charged yet
    _, http = api_client("tasks:start")
    assert post(http, "/api/v1/tasks", start_body(inv)).status_code == 201


def test_tasks_are_listed_by_reference_newest_first_a_page_at_a_time() -> None:
    made, http = api_client("tasks:read")
    inv = invoice()
    started = [
        task_start(kind="renewal", goal=f"renew {i}", refs=renewal_refs(inv), actor=made.actor).pk
        for i in range(3)
    ]
    reminders = task_start(
        kind="reminders",
        goal="remind",
        refs={"invoices": [{"invoice": inv, "email": "ada@example.com"}]},
        actor=made.actor,
    )
    first = http.get("/api/v1/tasks", {"ref": inv, "per_page": "2"}).json()
    assert first["total"] == 4 and first["pages"] == 2 and first["next_page"] == 2
    second = http.get("/api/v1/tasks", {"ref": inv, "per_page": "2", "page": "2"}).json()
    ids = [t["id"] for t in first["items"] + second["items"]]
    assert ids == [str(reminders.pk), *(str(pk) for pk in reversed(started))]
    assert http.get("/api/v1/tasks", {"ref": invoice()}).json()["total"] == 0
    assert http.get(f"/api/v1/tasks/{uuid.uuid4()}").status_code == 404


# --- Who may call ------------------------------------------------------------------------------


def test_no_token_a_wrong_or_revoked_token_is_401_and_a_missing_scope_403() -> None:
    task = task_start(kind="renewal", goal="renew", refs=renewal_refs(invoice()))
    path = f"/api/v1/tasks/{task.pk}"
    assert Client().get(path).status_code == 401
    assert Client(HTTP_AUTHORIZATION="Bearer ao_live_nope").get(path).status_code == 401
    made, token = api_client_create(name=f"prog-{uuid.uuid4().hex[:8]}", scopes=["tasks:read:all"])
    http = Client(HTTP_AUTHORIZATION=f"Bearer {token}")
    assert http.get(path).status_code == 200
    # The same prefix with another secret: the hash decides, not the prefix.
    forged = Client(HTTP_AUTHORIZATION=f"Bearer {token[:-4]}AAAA")
    assert forged.get(path).status_code == 401
    refused = post(http, f"/api/v1/tasks/{task.pk}/resume", {"reason": "go"})
    assert refused.status_code == 403
    assert "lacks the scope tasks:operate" in refused.json()["detail"]
    api_client_revoke(name=made.name)
    assert http.get(path).status_code == 401
    assert ApiClient.objects.get(pk=made.pk).token_hash != token  # only its hash is kept


def test_a_browser_session_alone_never_authenticates_an_api_call() -> None:
    admin = get_user_model().objects.create_superuser(
        username=f"root-{uuid.uuid4().hex[:8]}", password="a-Long-enough-pass-1"
    )
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(admin)
    inv = invoice()
    task = task_start(kind="renewal", goal="renew", refs=renewal_refs(inv))
    assert browser.get(f"/tasks/{task.pk}").status_code == 200  # the session is good
    assert browser.get(f"/api/v1/tasks/{task.pk}").status_code == 401
    assert browser.get("/api/v1/tasks").status_code == 401
    assert post(browser, "/api/v1/tasks", start_body(invoice())).status_code == 401
    assert len(tasks_of(inv)) == 1


def test_a_token_over_its_rate_limit_is_429_with_retry_after() -> None:
    made, http = api_client("tasks:read")
    with override_settings(API_RATE_LIMIT=3):
        for _ in range(2):  # a second go, should the minute turn during the first
            ApiClient.objects.filter(pk=made.pk).update(rate_window=None, rate_count=0)
            answers = [http.get("/api/v1/tasks", {"ref": "none"}) for _ in range(4)]
            windows = ApiClient.objects.filter(pk=made.pk).values_list("rate_count", flat=True)
            if windows[0] == 4:
                break
        assert [a.status_code for a in answers] == [200, 200, 200, 429]
        limited = answers[-1]
        assert 1 <= int(limited["Retry-After"]) <= 60
        assert "at most 3 requests a minute" in limited.json()["detail"]
        # Another client has a window of its own.
        _, other = api_client("tasks:read")
        assert other.get("/api/v1/tasks", {"ref": "none"}).status_code == 200
    assert ApiClient.objects.get(pk=made.pk).last_used_at is not None


# --- What an operator does, as the client ---------------------------------------------------


def test_approve_through_the_api_is_recorded_under_the_clients_name() -> None:
    plan: list[dict[str, Any]] = [
        {"tool": "hold_flight", "hold": True},
        {"tool": "book_hotel"},
        {"tool": "charge_customer"},
        {"tool": "send_email"},
    ]
    made, http = api_client("tasks:read", "tasks:approve")
    task = task_start(
        kind="trip", goal="Lisbon", refs=trip_refs(invoice()), plan=plan, actor=made.actor
    )
    run(task)  # held before its first step: nothing is sent
    assert Task.objects.get(pk=task.pk).status == "awaiting_approval"
    held = http.get(f"/api/v1/tasks/{task.pk}").json()["held"]
    assert held["tool"] == "hold_flight"

    wrong = {"approval_id": held["approval_id"], "digest": "0" * 64}
    refused = post(http, f"/api/v1/tasks/{task.pk}/approve", wrong, key="a1")
    assert refused.status_code == 409 and "approve what is shown now" in refused.json()["detail"]
    right = {"approval_id": held["approval_id"], "digest": held["digest"]}
    approved = post(http, f"/api/v1/tasks/{task.pk}/approve", right, key="a2")
    assert approved.status_code == 200, approved.content
    assert approved.json()["status"] == "runnable" and approved.json()["held"] is None
    approval = Approval.objects.get(pk=held["approval_id"])
    assert approval.state == "approved" and approval.decided_by == f"api:{made.name}"
    decided = Entry.objects.get(task=task, kind=EntryKind.APPROVAL_DECIDED)
    assert decided.actor == f"api:{made.name}"
    # Sent again (a lost answer): replayed, not decided twice.
    again = post(http, f"/api/v1/tasks/{task.pk}/approve", right, key="a2")
    assert again.status_code == 200 and again["Idempotent-Replayed"] == "true"


def test_an_action_the_journal_refuses_is_409_with_its_sentence() -> None:
    made, http = api_client("tasks:operate")
    task = task_start(kind="renewal", goal="renew", refs=renewal_refs(invoice()), actor=made.actor)
    for action in ("resume", "cancel"):
        refused = post(http, f"/api/v1/tasks/{task.pk}/{action}", {"reason": "try"})
        assert refused.status_code == 409, action
        assert "only a task that needs a human can be" in refused.json()["detail"]
    nothing = post(http, f"/api/v1/tasks/{task.pk}/reconcile", {"reason": "look"})
    assert nothing.status_code == 409 and "nothing to look up" in nothing.json()["detail"]
    missing = post(http, f"/api/v1/tasks/{uuid.uuid4()}/resume", {"reason": "try"})
    assert missing.status_code == 404
    no_reason = post(http, f"/api/v1/tasks/{task.pk}/resume", {})
    assert no_reason.status_code == 422
    assert no_reason.json()["problems"] == ["body.payload.reason: Field required"]
    acted = Entry.objects.filter(task=task, actor=made.actor).exclude(kind=EntryKind.TASK_CREATED)
    assert not acted.exists()


# --- Clients, made and listed ------------------------------------------------------------------


def test_api_client_command_prints_the_token_once_and_revokes_it() -> None:
    name = f"cron-{uuid.uuid4().hex[:8]}"
    out, err = io.StringIO(), io.StringIO()
    call_command("api_client", "create", name, "--scope", "tasks:read", stdout=out, stderr=err)
    token = out.getvalue().strip()
    assert token.startswith("ao_live_") and len(token) > 40
    assert "shown once" in err.getvalue()
    http = Client(HTTP_AUTHORIZATION=f"Bearer {token}")
    assert http.get("/api/v1/tasks", {"ref": "none"}).status_code == 200
    listed = io.StringIO()
    call_command("api_client", "list", stdout=listed)
    line = next(x for x in listed.getvalue().splitlines() if x.startswith(name))
    assert "tasks:read" in line and "live" in line and token not in listed.getvalue()
    call_command("api_client", "revoke", name, stdout=io.StringIO())
    assert http.get("/api/v1/tasks", {"ref": "none"}).status_code == 401


def test_the_admin_makes_a_client_and_shows_its_token_once() -> None:
    admin = get_user_model().objects.create_superuser(
        username=f"root-{uuid.uuid4().hex[:8]}", password="a-Long-enough-pass-1"
    )
    browser = Client()
    browser.force_login(admin)
    name = f"erp-{uuid.uuid4().hex[:8]}"
    page = browser.post("/admin/agentops/apiclient/add/", {"name": name, "scopes": ["tasks:read"]})
    assert page.status_code == 200, page.content[:2000]
    made = ApiClient.objects.get(name=name)
    token = page.context["token"]
    assert token.startswith(made.prefix) and token in page.content.decode()
    assert made.scopes == ["tasks:read"]
    http = Client(HTTP_AUTHORIZATION=f"Bearer {token}")
    assert http.get("/api/v1/tasks", {"ref": "none"}).status_code == 200
    assert token not in browser.get(f"/admin/agentops/apiclient/{made.pk}/change/").content.decode()


def test_the_app_role_may_not_change_a_clients_token_scopes_or_whose_key_it_is() -> None:
    """The app's database role (which every test uses) may note a client's use and revoke it,
    and complete a key; never swap a token, widen scopes, or move a key to another client."""
    made, http = api_client("tasks:start")
    post(http, "/api/v1/tasks", start_body(invoice()), key="mine")
    other, _ = api_client("tasks:start")
    for table, change in (
        (ApiClient.objects.filter(pk=made.pk), {"token_hash": "0" * 64}),
        (ApiClient.objects.filter(pk=made.pk), {"scopes": ALL_SCOPES}),
        (IdempotencyKey.objects.filter(client=made), {"client": other}),
    ):
        with pytest.raises(ProgrammingError, match="permission denied"), transaction.atomic():
            table.update(**change)
    with pytest.raises(ProgrammingError, match="permission denied"), transaction.atomic():
        ApiClient.objects.filter(pk=other.pk).delete()  # revoked, never deleted


# --- The schema --------------------------------------------------------------------------------


def test_the_openapi_schema_is_served_without_a_token_and_is_valid() -> None:
    response = Client().get("/api/v1/openapi.json")
    assert response.status_code == 200
    spec = response.json()
    validate(spec)
    assert spec["components"]["securitySchemes"]["ClientToken"]["scheme"] == "bearer"
    start = spec["paths"]["/api/v1/tasks"]["post"]
    assert {"201", "200", "409", "422"} <= set(start["responses"])
    headers = [p["name"] for p in start["parameters"] if p["in"] == "header"]
    assert headers == ["Idempotency-Key"]
    for action in ("approve", "reject", "resume", "cancel", "reconcile"):
        assert f"/api/v1/tasks/{{task_id}}/{action}" in spec["paths"]
    assert Client().get("/api/v1/docs").status_code == 200
