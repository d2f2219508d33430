"""The naive harness the chaos run compares agentops with (``manage.py chaos --harness naive``).

It is what a typical tool-calling loop does, on purpose: the same tools, the same providers,
the same tasks, faults, model and approvals, but no journal. The Stripe library keeps its
own default retries (``stripe.max_network_retries``: the library retries a request under
one idempotency key). A tool error reaches the model as a plain error flag, and the model
(devtools.chaos.model) calls the tool again, under a new key of the loop's (to a provider
the same as none), up to :data:`TRIES` times, then gives up and says it failed; after an
error it may slip as the safe harness's model does: rephrase the call (arguments the
tool's schema refuses, as a framework checks them), name a neighbouring invoice or
traveller, or forget what it did and start the task over. A trip's charge above the hold
is approved (or rejected) by the run's operator first, as the safe harness's is. Nothing
looks up what a timed-out call did, nothing stops a second task from acting on the same
invoice, and the loop's memory is the process's: a worker that dies takes its task with it.

Each task writes what it did and the summary it told to the directory
``AGENTOPS_CHAOS_NAIVE_DIR`` names (a start marker, then a record; an approval request and
the operator's answer go through the same directory) for the audit, which sets both against
the providers' ledgers. The key of an attempt is ``naive:<task>:<n>:<attempt>``, so the
audit can tell which intended action each effect belongs to.

Only :class:`NaiveWorker` runs its job: a production worker refuses it (agentops.workers).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from agentops.kinds import KindRules, kind_get, tool_registry, tools_wrapped
from agentops.money import money_text
from agentops.workers import AgentopsJob, AgentopsWorker
from devtools.chaos.model import FORGET, NEIGHBOUR, REPHRASE, Model, neighbouring, rephrased
from devtools.chaos.model import situation as situation_of
from devtools.chaos.truth import label, summary_render
from journal.outcomes import Interrupted, NotSent, Observation, Reply
from journal.protocols import TaskFacts
from journal.summary import evidence_label

NAIVE_JOB = "devtools.chaos.naive.run_naive_task"
# Set by the chaos run for its naive workers only: where they write what each task did.
NAIVE_DIR_VARIABLE = "AGENTOPS_CHAOS_NAIVE_DIR"
TRIES = 3
THINK_SECONDS = 0.2
"""How long the model takes to read an error and answer with a new call."""
APPROVAL_WAIT = 120.0
"""How long a held trip waits for the operator (the safe harness's APPROVAL_TTL_SECONDS)."""

UNDO = {
    "hold_flight": ("release_flight", "hold", "id"),
    "book_hotel": ("cancel_hotel", "booking", "id"),
    "charge_customer": ("refund_charge", "payment_intent", "payment_intent"),
}


class NaiveJob(AgentopsJob):
    allowed = frozenset({NAIVE_JOB})


class NaiveWorker(AgentopsWorker):
    """A worker for the naive harness's job and nothing else (started by the chaos run)."""

    jobs = NaiveJob


class Forgot(Exception):
    """The model's context was cleared: it starts the task over, not knowing what it did."""


def record_path(directory: Path, task: str) -> Path:
    return directory / f"{task}.json"


def started_path(directory: Path, task: str) -> Path:
    return directory / f"{task}.started"


def approval_path(directory: Path, task: str) -> Path:
    """A held call awaiting the operator: ``{"n", "tool", "args", "reason"}``."""
    return directory / f"{task}.approval"


def decision_path(directory: Path, task: str) -> Path:
    """The operator's answer to request ``n``: ``{"n", "decision"}``."""
    return directory / f"{task}.decision"


def write_whole(path: Path, data: Mapping[str, Any]) -> None:
    # Written whole or not at all: a worker killed mid-write leaves no half record.
    scratch = path.with_suffix(path.suffix + ".tmp")
    scratch.write_text(json.dumps(data))
    scratch.replace(path)


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return found


def _seen(observation: Observation) -> dict[str, Any]:
    """What an attempt saw, for the audit; the model itself only sees ok or error."""
    if isinstance(observation, Reply):
        refused = 400 <= observation.status < 500 and observation.status not in (409, 429)
        return {"status": observation.status, "code": observation.code, "refused": refused}
    sent = not isinstance(observation, NotSent)
    return {"error": observation.error_class, "sent": sent, "refused": False}


class NaiveLoop:
    """One task, run the naive way (see the module's docstring)."""

    def __init__(
        self,
        spec: Mapping[str, Any],
        tools: Mapping[str, Any],
        out: Path,
        model: Model | None = None,
    ) -> None:
        self.task = str(spec["task"])
        self.kind = str(spec["kind"])
        self.refs: Mapping[str, Any] = spec["refs"]
        self.plan = [str(p["tool"]) for p in spec.get("plan") or []]
        self.tools, self.out, self.model = tools, out, model
        self.rules = KindRules(
            kind_get(self.kind), self.refs, tool_registry(), spec.get("plan") or ()
        )
        self.intents: list[dict[str, Any]] = []
        self.remembered = 0
        """The first intent the model still remembers (it forgets the ones before)."""
        self.slips = 0
        self.asked = 0

    def run(self) -> str:
        began = time.time()
        write_whole(started_path(self.out, self.task), {"pid": os.getpid(), "at": began})
        runs: dict[str, Callable[[], str]] = {
            "renewal": self.renewal,
            "trip": self.trip,
            "reminders": self.reminders,
        }
        while True:
            try:
                outcome = runs[self.kind]()
                break
            except Forgot:
                self.remembered = len(self.intents)
        summary = self.summary()
        record = {
            "task": self.task,
            "kind": self.kind,
            "pid": os.getpid(),
            "started_at": began,
            "ended_at": time.time(),
            "outcome": outcome,
            "summary": ("Compensated. " if outcome == "compensated" else "") + summary,
            "intents": self.intents,
            "slips": self.slips,
        }
        write_whole(record_path(self.out, self.task), record)
        return outcome

    def act(self, tool: str, args: Mapping[str, Any], *, undoes: int | None = None) -> Any:
        """One intended action: call; on an error flag, the model answers with another call
        (the same, or slipped) under a fresh key; it gives up after :data:`TRIES`. Returns
        the evidence, or None (it "failed")."""
        honest = dict(args)
        guard = self.tools[tool].guard(honest) if not self.tools[tool].validate(honest) else None
        intent: dict[str, Any] = {
            "n": len(self.intents) + 1,
            "tool": tool,
            "label": label(tool, guard),
            "undoes": undoes,
            "attempts": [],
            "ok": False,
        }
        self.intents.append(intent)
        slip: str | None = None
        for attempt in range(1, TRIES + 1):
            key = f"naive:{self.task}:{intent['n']}:{attempt}"
            started = time.time()
            problems = self.tools[tool].validate(args)
            seen: Observation
            if problems:  # the framework checks the arguments against the tool's schema
                seen = Reply(400, code="invalid_arguments", message="; ".join(problems))
            else:
                try:
                    seen = self.tools[tool].call(args, key=key)
                except Exception as exc:  # the loop sees an error, like any other
                    seen = Interrupted(type(exc).__name__, str(exc)[:200])
            ok = isinstance(seen, Reply) and 200 <= seen.status < 300
            seen_now = _seen(seen) if not problems else {"invalid": problems, "refused": False}
            intent["attempts"].append(
                {"key": key, "args": dict(args), "started": started, "ended": time.time()}
                | {"ok": ok, "sent": not problems, "slip": slip}
                | seen_now
            )
            if ok:
                assert isinstance(seen, Reply)  # noqa: S101 - ok says so
                intent["ok"], intent["evidence"] = True, dict(seen.evidence)
                return dict(seen.evidence)
            time.sleep(THINK_SECONDS)  # the model reads {"error": true} and tries again
            slip = self._slip(intent, attempt) if undoes is None else None
            if slip == FORGET:
                intent["forgotten"] = True  # not given up: the model starts over
                raise Forgot
            if slip == REPHRASE:
                args = rephrased(honest)
            elif slip == NEIGHBOUR:
                args = neighbouring(honest)
            else:
                args = honest
        return None

    def _slip(self, intent: dict[str, Any], attempt: int) -> str | None:
        """Whether the model slips in its answer to an error (devtools.chaos.model)."""
        if self.model is None:
            return None
        where = situation_of(self.kind, self.refs, intent["n"], attempt)
        how = self.model.slip(where, self.slips)
        if how is not None:
            self.slips += 1
            intent.setdefault("slips", []).append(how)
        return how

    def approved(self, tool: str, args: Mapping[str, Any]) -> bool:
        """Whether the operator approves the call, when the task's rules hold it for a person
        (the same rule as the safe harness's: agentops.kinds.KindRules.hold)."""
        facts = TaskFacts(task_id=self.task, kind=self.kind, goal="", refs=self.refs, steps=[])
        reason = self.rules.hold(tool=tool, args=args, facts=facts)
        if reason is None:
            return True
        self.asked += 1
        request = {"n": self.asked, "tool": tool, "args": dict(args), "reason": reason}
        write_whole(approval_path(self.out, self.task), request)
        deadline = time.monotonic() + APPROVAL_WAIT
        while time.monotonic() < deadline:
            answer = read_json(decision_path(self.out, self.task))
            if answer is not None and answer.get("n") == self.asked:
                return answer.get("decision") == "approve"
            time.sleep(0.1)
        return False

    def summary(self) -> str:
        """What the model tells the user it did, in the journal's words (journal.summary):
        each call it remembers, done (with the evidence it was given), undone, or failed."""
        remembered = self.intents[self.remembered :]
        undo_of = {i["undoes"]: i for i in remembered if i["undoes"] is not None and i["ok"]}
        groups: dict[str, list[str]] = {"done": [], "undone": [], "not done": []}
        for intent in remembered:
            if intent["undoes"] is not None and intent["ok"]:
                continue  # said with the effect it undid
            if not intent["ok"]:
                tries = len(intent["attempts"])
                groups["not done"].append(f"{intent['label']} — failed after {tries} errors")
                continue
            said = f"{intent['label']} ({evidence_label(intent['evidence'])})"
            undo = undo_of.get(intent["n"])
            if undo is None:
                groups["done"].append(said)
            else:
                by = f"{undo['tool']} ({evidence_label(undo['evidence'])})"
                groups["undone"].append(f"{said}, undone by {by}")
        return summary_render(groups)

    # --- the kinds, as a model following the task's instructions would go about them --------

    def _charge(self) -> dict[str, Any]:
        r = self.refs
        return {
            "invoice": r["invoice"],
            "amount": r["amount"],
            "currency": r.get("currency", "usd"),
            "payment_method": r.get("payment_method", "pm_card_visa"),
        }

    def _email(self, purpose: str, subject: str, body: str) -> dict[str, Any]:
        return {
            "to": self.refs["email"],
            "subject": subject,
            "body": body,
            "reference": self.refs["invoice"],
            "purpose": purpose,
        }

    def renewal(self) -> str:
        inv = self.refs["invoice"]
        amount = money_text(self.refs["amount"], self.refs.get("currency", "usd"))
        if self.act("charge_customer", self._charge()) is not None:
            body = f"We received your payment of {amount}. Thank you."
            self.act("send_email", self._email("receipt", f"Receipt for {inv}", body))
        else:
            body = f"Your payment of {amount} did not go through. Please update your card."
            self.act("send_email", self._email("payment_failed", f"Payment failed for {inv}", body))
        return "finished"

    def trip(self) -> str:
        r = self.refs
        steps: dict[str, dict[str, Any]] = {
            "hold_flight": {"flight": r["flight"], "passenger": r["traveller"]},
            "book_hotel": {
                "hotel": r["hotel"],
                "guest": r["traveller"],
                "check_in": r["check_in"],
                "check_out": r["check_out"],
            },
            "charge_customer": self._charge(),
            "send_email": self._email(
                "itinerary",
                f"Your trip {r['invoice']}",
                f"Flight {r['flight']}, hotel {r['hotel']} from {r['check_in']}.",
            ),
        }
        done: list[tuple[int, str, dict[str, Any]]] = []
        for tool in self.plan or list(steps):
            if not self.approved(tool, steps[tool]):
                return self._undo(done)
            evidence = self.act(tool, steps[tool])
            if evidence is None and tool != "send_email":
                return self._undo(done)
            if evidence is not None:
                done.append((self.intents[-1]["n"], tool, evidence))
        return "finished"

    def _undo(self, done: list[tuple[int, str, dict[str, Any]]]) -> str:
        """What the model believes it did, it now undoes, newest first."""
        for n, made, proof in reversed(done):
            undo, arg, field = UNDO[made]
            self.act(undo, {arg: proof.get(field)}, undoes=n)
        return "compensated"

    def reminders(self) -> str:
        for item in self.refs["invoices"]:
            n = item.get("reminder", 1)
            args = {
                "to": item["email"],
                "subject": f"Reminder {n}: invoice {item['invoice']} is overdue",
                "body": f"Invoice {item['invoice']} is overdue. Please pay it.",
                "reference": item["invoice"],
                "purpose": "reminder",
                "reminder": n,
            }
            self.act("send_email", args)
        return "finished"


def run_naive_task(spec: str) -> str:
    """The naive harness's job: run one task (its spec, as JSON) the naive way."""
    directory = os.environ.get(NAIVE_DIR_VARIABLE, "")
    if not directory:
        raise RuntimeError(f"{NAIVE_DIR_VARIABLE} is not set: not a naive chaos worker")
    # Through the worker's tool wrappers, as the journal's runner: an armed worker dies too.
    tools = tools_wrapped(tool_registry())
    return NaiveLoop(json.loads(spec), tools, Path(directory), Model.from_env()).run()
