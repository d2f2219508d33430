"""The naive harness the chaos run compares agentops with (``manage.py chaos --harness naive``).

It is what a typical tool-calling loop does, on purpose: the same tools, the same providers,
the same tasks and the same faults, but no journal. A tool error reaches the model as a plain
error flag; the model, as models do, calls the tool again with freshly written arguments and
no key of its own (each attempt goes out under a new key, which to a provider is the same as
none), up to :data:`TRIES` times, then gives up and says it failed. Nothing looks up what a
timed-out call did, nothing stops a second task from acting on the same invoice, and the
loop's memory is the process's: a worker that dies takes its task with it.

Each task writes what it did and what it claimed to the directory ``AGENTOPS_CHAOS_NAIVE_DIR``
names (a start marker, then a record) for the audit, which sets the claims against the
providers' ledgers. The key of an attempt is ``naive:<task>:<n>:<attempt>``, so the audit can
tell which intended action each effect belongs to.

Only :class:`NaiveWorker` runs its job: a production worker refuses it (agentops.workers).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from agentops.tools import tool_registry, tools_wrapped
from agentops.workers import AgentopsJob, AgentopsWorker
from journal.outcomes import Interrupted, NotSent, Observation, Reply

NAIVE_JOB = "devtools.chaos.naive.run_naive_task"
# Set by the chaos run for its naive workers only: where they write what each task did.
NAIVE_DIR_VARIABLE = "AGENTOPS_CHAOS_NAIVE_DIR"
TRIES = 3
THINK_SECONDS = 0.2
"""How long the model takes to read an error and answer with a new call."""

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


def record_path(directory: Path, task: str) -> Path:
    return directory / f"{task}.json"


def started_path(directory: Path, task: str) -> Path:
    return directory / f"{task}.started"


def _write(path: Path, data: Mapping[str, Any]) -> None:
    # Written whole or not at all: a worker killed mid-write leaves no half record.
    scratch = path.with_suffix(path.suffix + ".tmp")
    scratch.write_text(json.dumps(data))
    scratch.replace(path)


def _seen(observation: Observation) -> dict[str, Any]:
    """What an attempt saw, for the audit; the model itself only sees ok or error."""
    if isinstance(observation, Reply):
        refused = 400 <= observation.status < 500 and observation.status not in (409, 429)
        return {"status": observation.status, "code": observation.code, "refused": refused}
    sent = not isinstance(observation, NotSent)
    return {"error": observation.error_class, "sent": sent, "refused": False}


class NaiveLoop:
    """One task, run the naive way (see the module's docstring)."""

    def __init__(self, spec: Mapping[str, Any], tools: Mapping[str, Any], out: Path) -> None:
        self.task = str(spec["task"])
        self.kind = str(spec["kind"])
        self.refs: Mapping[str, Any] = spec["refs"]
        self.plan = [str(p["tool"]) for p in spec.get("plan") or []]
        self.tools, self.out = tools, out
        self.intents: list[dict[str, Any]] = []

    def run(self) -> str:
        began = time.time()
        _write(started_path(self.out, self.task), {"pid": os.getpid(), "at": began})
        runs: dict[str, Callable[[], tuple[str, str]]] = {
            "renewal": self.renewal,
            "trip": self.trip,
            "reminders": self.reminders,
        }
        outcome, claim = runs[self.kind]()
        record = {
            "task": self.task,
            "kind": self.kind,
            "pid": os.getpid(),
            "started_at": began,
            "ended_at": time.time(),
            "outcome": outcome,
            "claim": claim,
            "intents": self.intents,
        }
        _write(record_path(self.out, self.task), record)
        return outcome

    def act(self, tool: str, make_args: Callable[[int], dict[str, Any]]) -> dict[str, Any] | None:
        """One intended action: call; on an error flag, call again with fresh arguments and a
        fresh key; give up after :data:`TRIES`. Returns the evidence, or None (it "failed")."""
        intent: dict[str, Any] = {"n": len(self.intents) + 1, "tool": tool, "attempts": []}
        intent["ok"] = False
        self.intents.append(intent)
        for attempt in range(1, TRIES + 1):
            args = make_args(attempt)
            key = f"naive:{self.task}:{intent['n']}:{attempt}"
            started = time.time()
            try:
                seen = self.tools[tool].call(args, key=key)
            except Exception as exc:  # the loop sees an error, like any other
                seen = Interrupted(type(exc).__name__, str(exc)[:200])
            ok = isinstance(seen, Reply) and 200 <= seen.status < 300
            intent["attempts"].append(
                {"key": key, "args": args, "started": started, "ended": time.time(), "ok": ok}
                | _seen(seen)
            )
            if ok:
                assert isinstance(seen, Reply)  # noqa: S101 - ok says so
                intent["ok"], intent["evidence"] = True, dict(seen.evidence)
                return dict(seen.evidence)
            time.sleep(THINK_SECONDS)  # the model reads {"error": true} and tries again
        return None

    # --- the kinds, as a model following the task's instructions would go about them --------

    def _charge(self, attempt: int) -> dict[str, Any]:
        r = self.refs
        again = "" if attempt == 1 else f" (retry {attempt - 1})"
        return {
            "invoice": r["invoice"],
            "amount": r["amount"],
            "currency": r.get("currency", "usd"),
            "payment_method": r.get("payment_method", "pm_card_visa"),
            "description": f"Invoice {r['invoice']}{again}",
        }

    def _email(self, purpose: str, subject: str, body: str) -> Callable[[int], dict[str, Any]]:
        def args(attempt: int) -> dict[str, Any]:
            again = "" if attempt == 1 else " (resent)"
            return {
                "to": self.refs["email"],
                "subject": subject + again,
                "body": body,
                "reference": self.refs["invoice"],
                "purpose": purpose,
            }

        return args

    def renewal(self) -> tuple[str, str]:
        inv = self.refs["invoice"]
        paid = self.act("charge_customer", self._charge)
        if paid is not None:
            sent = self.act(
                "send_email",
                self._email("receipt", f"Receipt for {inv}", "We received your payment."),
            )
            return "finished", f"{inv} charged; receipt {'sent' if sent else 'not sent'}"
        self.act(
            "send_email",
            self._email(
                "payment_failed", f"Payment failed for {inv}", "Your payment did not go through."
            ),
        )
        return "finished", f"{inv} not charged: the payment failed"

    def trip(self) -> tuple[str, str]:
        r = self.refs
        steps: dict[str, Callable[[int], dict[str, Any]]] = {
            "hold_flight": lambda _: {"flight": r["flight"], "passenger": r["traveller"]},
            "book_hotel": lambda _: {
                "hotel": r["hotel"],
                "guest": r["traveller"],
                "check_in": r["check_in"],
                "check_out": r["check_out"],
            },
            "charge_customer": self._charge,
            "send_email": self._email(
                "itinerary", f"Your trip {r['invoice']}", f"Flight {r['flight']}, {r['hotel']}."
            ),
        }
        done: list[tuple[str, dict[str, Any]]] = []
        for tool in self.plan or list(steps):
            evidence = self.act(tool, steps[tool])
            if evidence is None and tool != "send_email":
                # What the model believes it did, it now undoes, newest first.
                for made, proof in reversed(done):
                    undo, arg, field = UNDO[made]
                    self.act(undo, _always({arg: proof.get(field)}))
                return "compensated", f"trip {r['invoice']} failed at {tool}; undone"
            if evidence is not None:
                done.append((tool, evidence))
        return "finished", f"trip {r['invoice']} booked"

    def reminders(self) -> tuple[str, str]:
        sent = 0
        for item in self.refs["invoices"]:
            n = item.get("reminder", 1)

            def args(attempt: int, item: Mapping[str, Any] = item, n: int = n) -> dict[str, Any]:
                nudge = "" if attempt == 1 else " (again)"
                return {
                    "to": item["email"],
                    "subject": f"Reminder {n}: invoice {item['invoice']} is overdue{nudge}",
                    "body": f"Invoice {item['invoice']} is overdue. Please pay it.",
                    "reference": item["invoice"],
                    "purpose": "reminder",
                    "reminder": n,
                }

            sent += self.act("send_email", args) is not None
        return "finished", f"{sent} of {len(self.refs['invoices'])} reminders sent"


def _always(args: dict[str, Any]) -> Callable[[int], dict[str, Any]]:
    """Arguments that are the same on every attempt (an undo names what it undoes)."""
    return lambda _attempt: dict(args)


def run_naive_task(spec: str) -> str:
    """The naive harness's job: run one task (its spec, as JSON) the naive way."""
    directory = os.environ.get(NAIVE_DIR_VARIABLE, "")
    if not directory:
        raise RuntimeError(f"{NAIVE_DIR_VARIABLE} is not set: not a naive chaos worker")
    # Through the worker's tool wrappers, as the journal's runner: an armed worker dies too.
    tools = tools_wrapped(tool_registry())
    return NaiveLoop(json.loads(spec), tools, Path(directory)).run()
