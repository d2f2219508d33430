"""An in-process world for the journal's tests: a provider with a ledger, and its tool.

The provider behaves as an idempotent payments API: it remembers each key (with the
arguments and its first response) for ``key_lifetime``, replays the first response to a
retry with the same key, and refuses the same key with other arguments. Its ledger is the
ground truth of the effects it really performed. The tool can be told, call by call, to
misbehave in each way docs/design.md §2 lists.
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from journal.outcomes import Interrupted, NotSent, Observation, Outcome, Reply
from journal.protocols import Call, CostClass, Decision, Finish, TaskFacts


class SimulatedCrash(BaseException):
    """The worker process dies here: nothing after this point runs, nothing is released."""


@dataclass
class Effect:
    key: str
    args: dict[str, Any]
    id: str


@dataclass
class Provider:
    key_lifetime: float = 24 * 3600.0
    ledger: list[Effect] = field(default_factory=list)
    memory: dict[str, tuple[float, dict[str, Any], Effect | Reply]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    ids: Iterator[int] = field(default_factory=itertools.count)

    def apply(self, key: str, args: Mapping[str, Any], *, decline: bool = False) -> Effect | Reply:
        """Act once per remembered key: a retry gets the first response (effect or decline)."""
        with self.lock:
            now = time.monotonic()
            remembered = self.memory.get(key)
            if remembered is not None and now - remembered[0] < self.key_lifetime:
                if remembered[1] != dict(args):
                    return Reply(400, code="idempotency_error", message="key reused")
                return remembered[2]
            response: Effect | Reply
            if decline:
                response = Reply(402, code="card_declined", message="Your card was declined.")
            else:
                response = Effect(key=key, args=dict(args), id=f"eff_{next(self.ids)}")
                self.ledger.append(response)
            self.memory[key] = (now, dict(args), response)
            return response

    def find(self, key: str) -> Effect | None:
        with self.lock:
            return next((e for e in self.ledger if e.key == key), None)

    def effects_for(self, key: str) -> list[Effect]:
        with self.lock:
            return [e for e in self.ledger if e.key == key]


# What a call may do, in order of how much of it happens before things go wrong.
BEHAVIOURS = (
    "ok",  # the effect happens and the reply arrives
    "refuse",  # the provider declines (402) a key it has not seen: nothing happens
    "not_sent",  # connection refused before a byte left
    "timeout_before",  # the client gives up before the provider acts
    "timeout_after",  # the provider acts; the reply never arrives
    "error_500_after",  # the provider acts, then answers 500
    "rate_limited",  # 429: nothing happens, the answer is not a refusal
    "unauthorized",  # 401 before the provider looked: nothing happens now, our side is wrong
    "crash_before",  # the worker dies after recording, before the call leaves
    "crash_after",  # the worker dies after the provider acted, before settling
)


@dataclass
class ChargeTool:
    """A payments tool against :class:`Provider`: charge an invoice, keyed, guarded."""

    provider: Provider
    name: str = "charge"
    cost: CostClass = CostClass.FULL
    key_lifetime: timedelta = timedelta(hours=24)
    lookup_lag: timedelta = timedelta(0)
    script: list[str] = field(default_factory=list)
    lookup_script: list[str] = field(default_factory=list)
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    lookups: list[str] = field(default_factory=list)
    lookup_default: str = "ok"
    on_call: Any = None
    once_per_object: bool = False
    compensation: str | None = None
    irreversible: bool = False
    evidence: tuple[str, ...] = ("id",)

    def validate(self, args: Mapping[str, Any]) -> list[str]:
        problems = []
        amount = args.get("amount")
        if not isinstance(amount, int) or isinstance(amount, bool) or amount <= 0:
            problems.append(f"amount must be a positive integer of minor units, got {amount!r}")
        if not isinstance(args.get("invoice"), str):
            problems.append("invoice must be a string")
        return problems

    def guard(self, args: Mapping[str, Any]) -> str | None:
        return f"{self.name}:{args['invoice']}"

    def once(self, args: Mapping[str, Any]) -> bool:
        return self.once_per_object

    def undo_args(self, args: Mapping[str, Any], evidence: Mapping[str, Any]) -> dict[str, Any]:
        return {"invoice": args["invoice"], "amount": args["amount"], "undoes": evidence["id"]}

    def standing(self, args: Mapping[str, Any], evidence: Mapping[str, Any]) -> bool | None:
        return None

    def call(self, args: Mapping[str, Any], *, key: str) -> Observation:
        behaviour = self.script.pop(0) if self.script else "ok"
        self.calls.append((key, dict(args)))
        if self.on_call is not None:
            self.on_call(key, args)
        if behaviour == "crash_before":
            raise SimulatedCrash("killed before the call left")
        if behaviour == "not_sent":
            return NotSent("ConnectionRefusedError", "connection refused")
        if behaviour == "timeout_before":
            return Interrupted("ReadTimeout", "no reply within 5 s")
        if behaviour == "rate_limited":
            return Reply(429, code="rate_limit")
        if behaviour == "unauthorized":  # refused before the provider looked: our key
            return Reply(401, code="authentication_error")
        result = self.provider.apply(key, args, decline=behaviour == "refuse")
        if isinstance(result, Reply):
            return result
        if behaviour == "timeout_after":
            return Interrupted("ReadTimeout", "no reply within 5 s")
        if behaviour == "error_500_after":
            return Reply(500, code="api_error")
        if behaviour == "crash_after":
            raise SimulatedCrash("killed after the provider acted")
        return Reply(200, evidence={"id": result.id})

    def lookup(self, args: Mapping[str, Any], *, key: str) -> Outcome | None:
        self.lookups.append(key)
        behaviour = self.lookup_script.pop(0) if self.lookup_script else self.lookup_default
        if behaviour == "down":
            raise ConnectionError("provider down")
        if behaviour == "lagging":
            return None
        effect = self.provider.find(key)
        return Outcome.done({"id": effect.id}) if effect is not None else None


@dataclass
class ScriptedPlanner:
    """Decides from a list; ``rephrase`` makes it answer differently when asked again."""

    decisions: Sequence[Decision]
    asked: list[TaskFacts] = field(default_factory=list)
    rephrase: bool = False
    max_duration: timedelta = timedelta(0)

    def decide(self, facts: TaskFacts) -> Decision:
        self.asked.append(facts)
        decided = len(facts.steps)
        if decided < len(self.decisions):
            decision = self.decisions[decided]
            times_asked = sum(1 for f in self.asked if len(f.steps) == decided)
            if self.rephrase and times_asked > 1 and isinstance(decision, Call):
                # Like a model asked again: the same intent, regenerated arguments.
                args = dict(decision.args)
                if isinstance(args.get("amount"), int):
                    args["amount"] = f"{args['amount'] / 100:.2f}"
                return Call(decision.tool, args, raw={"rephrased": True})
            return decision
        return Finish("all done")


def step_key(task_id: uuid.UUID | str, n: int) -> str:
    """The key step ``n`` of the task has or will have, from the one function that formats
    keys (journal/sql/journal_step_key): a test that needs one before its step is recorded."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT journal_step_key(p_task => %s::uuid, p_n => %s)", [str(task_id), n])
        row = cursor.fetchone()
    assert row is not None
    return str(row[0])


def invoice() -> str:
    """A business reference no other test uses (tests share one committed database)."""
    return f"INV-{uuid.uuid4().hex[:10]}"


def charge(inv: str, amount: int = 4900) -> Call:
    return Call("charge", {"invoice": inv, "amount": amount}, raw={"model": "scripted"})
