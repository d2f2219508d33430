"""The endpoints. Thin, as the pages are: parse (ninja, from the schemas), check the scope,
call one service, answer. Every POST goes through the ``Idempotency-Key`` store; every
action is the operators' own service, recorded as ``api:<client>``."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Annotated, Any

import psycopg
from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db import Error as DatabaseError
from django.http import HttpRequest, HttpResponse
from ninja import NinjaAPI
from ninja.errors import ValidationError
from ninja.params.functions import Header, Path, Query

from agentops.api import selectors
from agentops.api.auth import ClientToken, RateLimited, client_of
from agentops.api.idempotency import (
    HEADER,
    REPLAYED_HEADER,
    Answer,
    BadKey,
    idempotent,
    key_of,
    problem,
)
from agentops.api.schemas import (
    AlreadyDoneFact,
    AlreadyDoneOut,
    ApproveIn,
    Problem,
    ReasonIn,
    ReconcileIn,
    RejectIn,
    TaskIn,
    TaskOut,
    TaskPageOut,
)
from agentops.api.services import AlreadyDone, task_start_unless_done
from agentops.kinds import TaskRefused, UnknownKind
from agentops.models import ApiClient, ApiScope
from agentops.operators.services import (
    steps_reconcile_now,
    task_approve,
    task_cancel,
    task_reject,
    task_resume,
)
from agentops.unavailable import api_exception
from journal.models import Task
from journal.status import TransitionRefused

DESCRIPTION = """
Start agentops tasks, read them, and do what an operator does to them.

Authenticate with `Authorization: Bearer ao_live_…` (a client's token, from
`manage.py api_client create`); session cookies are not accepted. Each endpoint needs a
scope, which it names as `x-scope`: `tasks:start`, `tasks:read`, `tasks:approve` or
`tasks:operate`. A client reads and acts on the tasks it started (over this API or MCP);
`tasks:read:all`, `tasks:approve:all` and `tasks:operate:all` reach every client's tasks.
Another client's task is, to it, no task: 404, as one that does not exist.

Send an `Idempotency-Key` header with every POST (strongly recommended, above all when
starting a task): a retry with the same key and body gets the first answer again, with
`Idempotent-Replayed: true`, and nothing is done twice; the same key with another body is
422, and while the first request is still being answered, 409. Keys are kept 24 hours
(`API_IDEMPOTENCY_TTL_SECONDS`).

A step is `done` (with evidence), `not_done`, `unknown` (it may have happened: it is being
looked up — never read it as failed) or `in_flight`.
"""

api = NinjaAPI(
    title="agentops",
    version="1",
    description=DESCRIPTION,
    auth=ClientToken(),
    urls_namespace="api",
)

IdempotencyKeyHeader = Header(
    None,
    alias=HEADER,
    description="A key of yours for this request (a UUID): a retry with it is answered "
    "as the first request was, and never done twice.",
)
# What each refusal means, in the schema (and so in docs/api.md, rendered from it); an
# endpoint lists those it can answer.
TaskId = Annotated[uuid.UUID, Path(description="The task's id (`id` in the answers).")]
PROBLEMS: dict[int, str] = {
    400: "The `Idempotency-Key` header is not a valid key; nothing was done.",
    401: "No token, or one that is not a live client's (revoked, or never made).",
    403: "The client's token lacks the scope this endpoint needs (the answer names it).",
    404: "There is no task with that id among those this client may reach (the tasks it "
    "started, or every task with the scope's `:all`).",
    413: "The request's body is larger than the server takes (`DATA_UPLOAD_MAX_MEMORY_SIZE`); "
    "nothing was read, nor done.",
    409: "Refused as things stand, with the journal's sentence (a task that does not need a "
    "person, a step that may still have acted, a digest that is not what waits); or a "
    "request with the same `Idempotency-Key` is still being answered: send it again in a "
    "moment.",
    422: "The request is not valid, every problem in `problems`, and nothing was done; or the "
    "same `Idempotency-Key` was sent with another method, path or body.",
    429: "More than `API_RATE_LIMIT` requests this minute from this client: try again after "
    "`Retry-After` seconds.",
}
READ = (401, 403, 422, 429)
ACT = (400, 401, 403, 404, 409, 413, 422, 429)


def answers(scope: ApiScope, ok: dict[int, tuple[Any, str]], problems: tuple[int, ...]) -> Any:
    """An endpoint's ``response`` and ``openapi_extra``: what it answers, what each answer
    means, and the scope its client needs (``x-scope``, which its view checks with
    ``client_of``), so that the schema says all three."""
    meanings = {status: meaning for status, (_, meaning) in ok.items()}
    meanings.update({status: PROBLEMS[status] for status in problems})
    return {
        "response": {
            **{status: model for status, (model, _) in ok.items()},
            **dict.fromkeys(problems, Problem),
        },
        "openapi_extra": {
            "x-scope": scope.value,
            "responses": {status: {"description": m} for status, m in meanings.items()},
        },
    }


TASK_NOW = (TaskOut, "The task, as it is now.")


@api.exception_handler(ValidationError)
def invalid(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    """A request the schemas refuse (nothing was done, nor stored for its Idempotency-Key):
    422, each problem a sentence, as a refused task's are."""
    problems = [
        f"{'.'.join(str(p) for p in error.get('loc', ()))}: {error.get('msg', 'not valid')}"
        for error in exc.errors
    ]
    return api.create_response(
        request, {"detail": "the request is not valid", "problems": problems}, status=422
    )


@api.exception_handler(RequestDataTooBig)
def too_big(request: HttpRequest, exc: RequestDataTooBig) -> HttpResponse:
    """A body over Django's limit, found when the body is first read: 413 in the API's own
    shape (Django alone answers it 400, as an HTML page). Nothing was read, nor done, nor
    stored for its Idempotency-Key."""
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return api.create_response(
        request,
        {
            "detail": f"the request's body is larger than the {limit} bytes this server takes "
            "(DATA_UPLOAD_MAX_MEMORY_SIZE); nothing was done"
        },
        status=413,
    )


@api.exception_handler(RateLimited)
def rate_limited(request: HttpRequest, exc: RateLimited) -> HttpResponse:
    response = api.create_response(request, {"detail": str(exc)}, status=429)
    response["Retry-After"] = str(exc.retry_after)
    return response


# No primary (a failover): 503 in the API's shape, with Retry-After (agentops/unavailable.py).
@api.exception_handler(DatabaseError)
def database_error(request: HttpRequest, exc: DatabaseError) -> HttpResponse:
    return api_exception(request, exc)


@api.exception_handler(psycopg.Error)
def driver_error(request: HttpRequest, exc: psycopg.Error) -> HttpResponse:
    return api_exception(request, exc)


def _respond(answer: Answer) -> HttpResponse:
    response = HttpResponse(answer.body, status=answer.status, content_type="application/json")
    if answer.replayed:
        response[REPLAYED_HEADER] = "true"
    return response


def _once(request: HttpRequest, client: ApiClient, work: Callable[[], Answer]) -> HttpResponse:
    """Answer this POST through the Idempotency-Key store."""
    try:
        key = key_of(request.headers.get(HEADER))
    except BadKey as exc:
        return _respond(problem(400, str(exc)))
    return _respond(
        idempotent(
            client=client,
            key=key,
            method=request.method or "POST",
            path=request.path,
            body=request.body,
            work=work,
        )
    )


def _task(task_id: uuid.UUID, status: int = 200) -> Answer:
    try:
        return Answer(status, selectors.task_out(task_id=task_id).model_dump_json())
    except Task.DoesNotExist:
        return problem(404, f"no task {task_id}")


def _acting(
    task_id: uuid.UUID, act: Callable[[], object], *, client: ApiClient, scope: ApiScope
) -> Answer:
    """Do an operator's action on a task; the task as it is now, or why not (409). Another
    client's task, unless ``scope`` reaches every task for this one, is no task (404)."""
    if not selectors.task_seen(task_id=task_id, client=client, scope=scope):
        return problem(404, f"no task {task_id}")
    try:
        act()
    except TransitionRefused as exc:
        return problem(409, str(exc))
    return _task(task_id)


# --- Starting and reading --------------------------------------------------------------------


@api.post(
    "/tasks",
    summary="Start a task",
    **answers(
        ApiScope.TASKS_START,
        {
            201: (TaskOut, "The task, recorded: a worker runs it."),
            200: (
                AlreadyDoneOut,
                "The effect the task is for already stands done: nothing was started.",
            ),
        },
        (400, 401, 403, 409, 413, 422, 429),
    ),
)
def tasks_start(
    request: HttpRequest,
    payload: TaskIn,
    idempotency_key: str | None = IdempotencyKeyHeader,
) -> HttpResponse:
    """Record a task and have a worker run it: **201** with the task. Refs the kind does not
    accept are **422** with every problem named, and nothing is recorded. When the effect the
    task is for already stands done (a renewal of an invoice that is paid), **200** with
    `already_done` — the tool, the object, its evidence, its step and task — and nothing is
    started."""
    client = client_of(request, ApiScope.TASKS_START)

    def work() -> Answer:
        try:
            started = task_start_unless_done(
                kind=payload.kind,
                goal=payload.goal,
                refs=payload.refs,
                plan=payload.plan,
                actor=client.actor,
            )
        except UnknownKind as exc:
            return problem(422, "the task was not started", problems=[str(exc)])
        except TaskRefused as exc:
            return problem(422, "the task was not started", problems=exc.problems)
        if isinstance(started, AlreadyDone):
            fact = AlreadyDoneFact(**vars(started))
            return Answer(200, AlreadyDoneOut(already_done=fact).model_dump_json())
        return _task(started.pk, status=201)

    return _once(request, client, work)


@api.get(
    "/tasks/{task_id}",
    summary="Read a task",
    **answers(ApiScope.TASKS_READ, {200: TASK_NOW}, (*READ, 404)),
)
def tasks_read(request: HttpRequest, task_id: TaskId) -> HttpResponse:
    """The task: its status, why it needs a person if it does, its refs and summary, what is
    held for approval, and every step with its frozen arguments, key, and evidence or
    reason."""
    client = client_of(request, ApiScope.TASKS_READ)
    if not selectors.task_seen(task_id=task_id, client=client, scope=ApiScope.TASKS_READ):
        return _respond(problem(404, f"no task {task_id}"))
    return _respond(_task(task_id))


@api.get(
    "/tasks",
    summary="List tasks by reference",
    **answers(ApiScope.TASKS_READ, {200: (TaskPageOut, "A page of tasks, newest first.")}, READ),
)
def tasks_list(
    request: HttpRequest,
    ref: str = Query(
        "",
        description="What the operators' search finds a task by (a reference its kind "
        "declares, such as an invoice, `INV-2291`; a customer's name or email; a provider's id "
        "in its evidence; a step's key; the task's id), or an object one of its steps acted "
        "on (`INV-2291` or `charge:INV-2291`).",
    ),
    page: int = Query(1, ge=1, description="Which page, from 1."),
    per_page: int = Query(
        selectors.PER_PAGE, ge=1, le=selectors.PER_PAGE_MAX, description="Tasks a page."
    ),
) -> TaskPageOut:
    """This client's tasks (every client's, with `tasks:read:all`) about a business reference
    (all of them without one), newest first, a page at a time."""
    client = client_of(request, ApiScope.TASKS_READ)
    seen = selectors.tasks_seen(client=client, scope=ApiScope.TASKS_READ)
    return selectors.task_page_out(ref=ref, page=page, per_page=per_page, tasks=seen)


# --- What an operator does ---------------------------------------------------------------------


@api.post(
    "/tasks/{task_id}/approve",
    summary="Approve a held step",
    **answers(ApiScope.TASKS_APPROVE, {200: TASK_NOW}, ACT),
)
def tasks_approve(
    request: HttpRequest,
    task_id: TaskId,
    payload: ApproveIn,
    idempotency_key: str | None = IdempotencyKeyHeader,
) -> HttpResponse:
    """Approve exactly the held step you were shown (`held.approval_id` and `held.digest`):
    the saga goes on with it. Another digest, or nothing held, is **409**; so is a request
    that expired (the saga decides again and asks anew)."""
    client = client_of(request, ApiScope.TASKS_APPROVE)

    def act() -> None:
        approved = task_approve(
            task_id=task_id,
            approval_id=payload.approval_id,
            digest=payload.digest,
            actor=client.actor,
        )
        if not approved:
            raise TransitionRefused(
                "the request for approval had expired: the saga decides again and asks anew"
            )

    return _once(
        request,
        client,
        lambda: _acting(task_id, act, client=client, scope=ApiScope.TASKS_APPROVE),
    )


@api.post(
    "/tasks/{task_id}/reject",
    summary="Reject a held step",
    **answers(ApiScope.TASKS_APPROVE, {200: TASK_NOW}, ACT),
)
def tasks_reject(
    request: HttpRequest,
    task_id: TaskId,
    payload: RejectIn,
    idempotency_key: str | None = IdempotencyKeyHeader,
) -> HttpResponse:
    """Reject the held step: it never runs, and the saga undoes what it did."""
    client = client_of(request, ApiScope.TASKS_APPROVE)
    return _once(
        request,
        client,
        lambda: _acting(
            task_id,
            lambda: task_reject(
                task_id=task_id,
                approval_id=payload.approval_id,
                actor=client.actor,
                reason=payload.reason,
            ),
            client=client,
            scope=ApiScope.TASKS_APPROVE,
        ),
    )


@api.post(
    "/tasks/{task_id}/resume",
    summary="Resume a task",
    **answers(ApiScope.TASKS_OPERATE, {200: TASK_NOW}, ACT),
)
def tasks_resume(
    request: HttpRequest,
    task_id: TaskId,
    payload: ReasonIn,
    idempotency_key: str | None = IdempotencyKeyHeader,
) -> HttpResponse:
    """Let a task that needs a person go on (**409** if it does not need one)."""
    client = client_of(request, ApiScope.TASKS_OPERATE)
    return _once(
        request,
        client,
        lambda: _acting(
            task_id,
            lambda: task_resume(task_id=task_id, actor=client.actor, reason=payload.reason),
            client=client,
            scope=ApiScope.TASKS_OPERATE,
        ),
    )


@api.post(
    "/tasks/{task_id}/cancel",
    summary="Cancel a task",
    **answers(ApiScope.TASKS_OPERATE, {200: TASK_NOW}, ACT),
)
def tasks_cancel(
    request: HttpRequest,
    task_id: TaskId,
    payload: ReasonIn,
    idempotency_key: str | None = IdempotencyKeyHeader,
) -> HttpResponse:
    """Stop a task that needs a person for good. Refused (**409**) while one of its steps may
    still have acted, or while a saga has effects to undo."""
    client = client_of(request, ApiScope.TASKS_OPERATE)
    return _once(
        request,
        client,
        lambda: _acting(
            task_id,
            lambda: task_cancel(task_id=task_id, actor=client.actor, reason=payload.reason),
            client=client,
            scope=ApiScope.TASKS_OPERATE,
        ),
    )


@api.post(
    "/tasks/{task_id}/reconcile",
    summary="Look a task's unknown steps up now",
    **answers(ApiScope.TASKS_OPERATE, {200: TASK_NOW}, ACT),
)
def tasks_reconcile(
    request: HttpRequest,
    task_id: TaskId,
    payload: ReconcileIn,
    idempotency_key: str | None = IdempotencyKeyHeader,
) -> HttpResponse:
    """Have the task's unknown steps (or step `step`) looked up at their provider now, by
    key; each is sent again, with the same key, only while the provider still remembers the
    key. **409** when there is nothing to look up."""
    client = client_of(request, ApiScope.TASKS_OPERATE)

    def act() -> None:
        steps = selectors.unknown_steps(task_id=task_id, n=payload.step)
        if not steps:
            which = f"step {payload.step} is" if payload.step is not None else "no step is"
            raise TransitionRefused(
                f"{which} unknown or abandoned in flight: there is nothing to look up"
            )
        steps_reconcile_now(step_ids=steps, actor=client.actor, reason=payload.reason)

    return _once(
        request,
        client,
        lambda: _acting(task_id, act, client=client, scope=ApiScope.TASKS_OPERATE),
    )
