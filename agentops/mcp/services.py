"""An intent asked for over MCP: one effect, however often and by whomever it is asked
(docs/design.md §6; docs/mcp.md).

1. The arguments are normalised (NFKC, invisible characters removed, white space trimmed,
   ``"2"`` read as 2 where an integer is meant) and checked against the intent's schema:
   arguments that do not fit are refused, and nothing is read or started.
2. The intent's **key** is derived from the intent and its effect's business object, in the
   journal's normal form (``charge_invoice:charge:inv-2291``) — never from the request, so a
   repeated call, from any client, with the invoice spelt otherwise, has the same key. Its row
   (``IntentKey``, unique on the key) is claimed first; a client's own idempotency key is an
   extra name for it (``IntentClientKey``, unique per client): used again with arguments of
   another intent, it is refused, and nothing is done.
3. If an effect stands on the object (done, or in flight or unknown), in any task, or the
   intent's task is still going, or it made its effect: that is the answer, and nothing new
   starts. Otherwise (first call, or the last task ended with its effect provably never
   done) the system of record is read through the intent's ``READ`` tools — outside any
   transaction — and a task is started under the row's lock, which a concurrent caller
   waits on and then finds the task.
4. The answer is waited for, up to ``MCP_WAIT_SECONDS``: done or not done ends the wait; an
   effect still unknown is answered as unknown, with what is being checked and when.
"""

from __future__ import annotations

import hashlib
import json
import time
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from django.db import transaction
from django.db.models import F
from django.db.models.functions import Now

from agentops.effects import (
    Intent,
    IntentRefused,
    RecordMissing,
    RecordUnreadable,
    intent_get,
    schema_problems,
    task_start,
)
from agentops.kinds import TaskRefused, tool_registry
from agentops.mcp.selectors import Answer, intent_answer, standing_effect, task_acted_on
from agentops.models import ApiClient, IntentClientKey, IntentKey
from journal.keys import UnsafeName, name_problem, object_key, object_label, same_object
from journal.models import Task
from journal.outcomes import Reply
from journal.protocols import CostClass
from journal.status import FINAL

CLIENT_KEY_MAX = 255
READ_TRIES = 3
POLL_SECONDS = 0.1


@dataclass(frozen=True)
class Asked:
    """An intent's call, normalised: its arguments, its object and its key."""

    intent: Intent
    args: dict[str, Any]
    object: str
    object_key: str
    key: str
    digest: str


def _text(value: str) -> str:
    """Text as a name is compared: NFKC, invisible characters gone, white space trimmed."""
    kept = "".join(
        c for c in unicodedata.normalize("NFKC", value) if unicodedata.category(c) != "Cf"
    )
    return " ".join(kept.split())


def _normalised(schema: Mapping[str, Any], args: Mapping[str, Any]) -> dict[str, Any]:
    props = schema.get("properties") or {}
    out: dict[str, Any] = {}
    for name, value in args.items():
        kind = (props.get(name) or {}).get("type")
        if isinstance(value, str):
            value = _text(value)
            if kind == "integer" and value.isascii() and value.isdigit() and len(value) < 10:
                value = int(value)
        out[name] = value
    return out


def _digest(intent: Intent, args: Mapping[str, Any]) -> str:
    """The arguments as the guards compare names (case and spacing aside)."""
    folded = {k: _text(v).casefold() if isinstance(v, str) else v for k, v in args.items()}
    text = json.dumps({"intent": intent.name, "args": folded}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def intent_asked(intent: Intent, raw: Any) -> Asked | list[str]:
    """The call, normalised and checked; or every problem with it, each a sentence."""
    if not isinstance(raw, Mapping):
        return ["arguments: must be a JSON object"]
    problems = [
        f"{name}: {problem}"
        for name, value in raw.items()
        if isinstance(value, str) and (problem := name_problem(value)) is not None
    ]
    if problems:
        return problems
    args = _normalised(intent.schema, raw)
    problems = schema_problems(intent.schema, args)
    if problems:
        return problems
    try:
        identity = intent.identity(args)
        label = object_label(identity)
        key = object_key(f"{intent.name}:{identity}")
    except UnsafeName as exc:
        return [str(exc)]
    return Asked(intent, args, label, object_key(identity), key, _digest(intent, args))


def record_read(*, tool: str, args: Mapping[str, Any]) -> dict[str, Any]:
    """The record a ``READ`` tool returns for ``args``, with bounded retries (a read has no
    effect to be unsure about). Raises :class:`RecordMissing` (no such record),
    :class:`IntentRefused` (arguments the tool does not take) or :class:`RecordUnreadable`
    (the provider could not tell)."""
    known = tool_registry().get(tool)
    if known is None or known.cost != CostClass.READ:
        raise RecordUnreadable(f"{tool} is not a declared READ tool")
    if isinstance(args, Mapping):  # as an intent's arguments are: `` inv-2291 `` is inv-2291
        args = _normalised(known.schema, args)
    problems = known.validate(args)
    if problems:
        raise IntentRefused("; ".join(problems))
    seen: object = None
    for attempt in range(READ_TRIES):
        seen = known.call(args, key="")
        if isinstance(seen, Reply):
            if seen.status < 300:
                return dict(seen.evidence)
            if seen.status == 404 and seen.code == "resource_missing":
                raise RecordMissing(seen.message or f"{tool} found no record for {dict(args)}")
            if seen.status < 500 and seen.status not in (409, 429):
                raise RecordUnreadable(f"{tool}: HTTP {seen.status} {seen.code}".strip())
        if attempt + 1 < READ_TRIES:
            time.sleep(0.2 * 2**attempt)
    raise RecordUnreadable(f"{tool} did not answer ({seen})")


class ReadTools:
    """An intent's :class:`agentops.effects.Records`: the READ tools it declares."""

    def __init__(self, intent: Intent) -> None:
        self.intent = intent

    def read(self, tool: str, args: Mapping[str, Any]) -> dict[str, Any]:
        if tool not in self.intent.reads:
            raise RecordUnreadable(f"{self.intent.name} declares no READ tool {tool}")
        return record_read(tool=tool, args=args)


def _refused(code: str, reason: str, asked: Asked | None = None) -> Answer:
    return Answer(
        state="not_done",
        refused=code,
        reason=f"{reason}; nothing was done",
        object=asked.object if asked else None,
        intent=asked.intent.name if asked else None,
    )


def _claim(asked: Asked, client: ApiClient) -> IntentKey:
    row, _ = IntentKey.objects.get_or_create(
        key=asked.key,
        defaults={
            "intent": asked.intent.name,
            "object": asked.object,
            "args": asked.args,
            "args_digest": asked.digest,
            "client": client,
        },
    )
    return row


def _key_conflict(asked: Asked, alias: IntentClientKey) -> Answer | None:
    if alias.intent.key == asked.key and alias.args_digest == asked.digest:
        return None
    first = alias.intent
    return _refused(
        "key_conflict",
        f"refused: idempotency key {alias.key!r} was used for {first.intent} "
        f"{json.dumps(first.args, sort_keys=True)}, not for these arguments: a retry must send "
        "the same arguments, and a new intent needs a new key",
        asked,
    )


def _reattemptable(row: IntentKey, asked: Asked) -> bool:
    """Whether a new task may be started for the intent: none was, or the last one ended and
    its effect provably never happened (declined, refused, never attempted)."""
    if row.task_id is None:
        return True
    status = Task.objects.filter(pk=row.task_id).values_list("status", flat=True).first()
    return status in FINAL and not task_acted_on(task_id=row.task_id, key=asked.object_key)


def _as_recorded(args: Mapping[str, Any], refs: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments with each name spelt as the record spells it, where the task's refs
    carry the same name under the same field (``inv-2291`` → the record's INV-2291): the
    task's goal and every answer name it so, whoever asked first and however."""
    return {
        k: refs[k]
        if isinstance(v, str) and isinstance(refs.get(k), str) and same_object(v, refs[k])
        else v
        for k, v in args.items()
    }


def _task_refs(row_id: int) -> Mapping[str, Any]:
    """The refs of the intent's task (none yet: empty)."""
    task_id = IntentKey.objects.filter(pk=row_id).values_list("task_id", flat=True).first()
    if task_id is None:
        return {}
    refs = Task.objects.filter(pk=task_id).values_list("refs", flat=True).first()
    return refs if isinstance(refs, Mapping) else {}


def _start(asked: Asked, row: IntentKey, refs: Mapping[str, Any], actor: str) -> bool:
    """Start the intent's task, under its row's lock, unless another call did meanwhile or an
    effect now stands on the object. Whether this call started it."""
    with transaction.atomic():
        locked = IntentKey.objects.select_for_update().get(pk=row.pk)
        if locked.task_id != row.task_id or standing_effect(key=asked.object_key) is not None:
            return False
        named = _as_recorded(asked.args, refs)
        task = task_start(
            kind=asked.intent.kind, goal=asked.intent.goal(named), refs=dict(refs), actor=actor
        )
        IntentKey.objects.filter(pk=row.pk).update(
            task=task, attempts=F("attempts") + 1, updated_at=Now()
        )
    return True


def _link(row: IntentKey, task_id: Any) -> None:
    """An intent first asked for when its effect already stood (another task made it): it is
    that task's."""
    IntentKey.objects.filter(pk=row.pk, task__isnull=True).update(task_id=task_id, updated_at=Now())


def intent_call(
    *,
    name: str,
    arguments: Any,
    client: ApiClient,
    client_key: str | None = None,
    wait: float = 0.0,
) -> Answer:
    """Ask for an intent as ``client`` (module docstring): its effect's answer, waited for up
    to ``wait`` seconds. Raises ``KeyError`` for an intent nobody declared."""
    intent = intent_get(name)
    asked = intent_asked(intent, arguments)
    if not isinstance(asked, Asked):
        return _refused("invalid_arguments", f"invalid arguments: {'; '.join(asked)}")
    if client_key is not None:
        if not client_key or len(client_key) > CLIENT_KEY_MAX or name_problem(client_key):
            return _refused(
                "invalid_arguments",
                f"invalid idempotency key: 1 to {CLIENT_KEY_MAX} printable characters",
                asked,
            )
        prior = (
            IntentClientKey.objects.filter(client=client, key=client_key)
            .select_related("intent")
            .first()
        )
        if prior is not None and (conflict := _key_conflict(asked, prior)) is not None:
            return conflict
    row = _claim(asked, client)
    if client_key is not None:
        alias, _ = IntentClientKey.objects.get_or_create(
            client=client, key=client_key, defaults={"intent": row, "args_digest": asked.digest}
        )
        alias = IntentClientKey.objects.select_related("intent").get(pk=alias.pk)
        if (conflict := _key_conflict(asked, alias)) is not None:
            return conflict
    started = False
    standing = standing_effect(key=asked.object_key)
    if standing is not None:
        _link(row, standing.task_id)
    elif _reattemptable(row, asked):
        refusal = None
        try:
            refs = intent.refs(asked.args, ReadTools(intent))
            started = _start(asked, row, refs, actor=f"mcp:{client.name}")
        except RecordMissing as exc:
            refusal = _refused("not_found", f"not found in the system of record: {exc}", asked)
        except IntentRefused as exc:
            refusal = _refused("record_refused", f"refused: {exc}", asked)
        except RecordUnreadable as exc:
            refusal = _refused(
                "record_unreadable",
                f"the system of record could not be read ({exc}); ask again in a moment",
                asked,
            )
        except TaskRefused as exc:
            refusal = _refused("task_refused", f"refused: {exc}", asked)
        if refusal is not None:
            # Another call for the same intent (spelt as the record spells it) may have
            # started it meanwhile: then that is the answer, not this call's refusal.
            now = IntentKey.objects.get(pk=row.pk)
            if now.task_id == row.task_id and standing_effect(key=asked.object_key) is None:
                return refusal
    answer = intent_wait(row_id=row.pk, wait=wait)
    return replace(
        answer,
        intent=intent.name,
        object=answer.object or asked.object,
        repeated=not started,
        noun=intent.noun,
        # Named as the record spells it (else as the first call did), whatever this call's
        # spelling.
        subject=intent.subject(_as_recorded(row.args or asked.args, _task_refs(row.pk))),
    )


def intent_wait(*, row_id: int, wait: float) -> Answer:
    """The intent's answer once its effect is settled (done or not done), or as it stands
    after ``wait`` seconds."""
    deadline = time.monotonic() + wait
    while True:
        answer = intent_answer(row=IntentKey.objects.get(pk=row_id))
        left = deadline - time.monotonic()
        if answer.state != "unknown" or left <= 0:
            return answer
        time.sleep(min(POLL_SECONDS, left))
