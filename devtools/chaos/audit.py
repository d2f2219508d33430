"""The chaos run's verdict: what the harness says happened, against what the providers did.

The providers' ledgers are the ground truth (every effect they really performed, with the
request's key and parameters). From them alone:

- **duplicates**: an intended action (a step's key, a compensation's key; for the naive
  harness, its action ``naive:<task>:<n>``) that took effect more than once;
- **business duplicates**: a second standing charge for one invoice, a second receipt,
  itinerary or reminder N of one reference, a second standing flight hold for one passenger
  and flight, or hotel booking for one guest, hotel and night — across tasks.

Against the journal (or the naive loop's own record):

- **lost**: a task with no final state and no flag for a human;
- **unknown_open**: steps still unknown (or in flight) at the end;
- **needs_human**: each flagged task, with its code and sentence;
- **compensation_mismatch**: an effect of a saga neither standing (the saga finished) nor
  offset exactly once (it was compensated), by the providers' account;
- **dropped_intents**: an effect a task meant to make that ended not done for a passing
  reason and was never tried again;
- **untrue_summaries**: a task whose final summary disagrees with its journal (the naive
  loop: whose claims disagree with the ledgers);
- **journal_mismatch**: a step the journal calls done with no effect, or not done with one.

Recovery (``recovery_s``): for each fault kind, how long from the fault hitting a task to the
task moving again — for a provider fault, the step it hit settling (done, or not done for
good); for a process fault, the first thing a runner writes for the task after it (counted
from when the task was due, if it was waiting); ``never`` when that did not happen.
"""

from __future__ import annotations

import json
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from devtools.chaos.naive import record_path
from devtools.chaos.plan import Plan
from journal.models import Entry, EntryKind, Step, StepKind, Task, TaskStatus
from journal.outcomes import StepState
from journal.selectors import task_facts
from journal.status import FINAL
from journal.summary import task_summary

# Which provider operation performs each tool's effect, and how its ledger entry is found.
EFFECTS = {
    "charge_customer": ("payments", "payment_intents.create"),
    "refund_charge": ("payments", "refunds.create"),
    "send_email": ("mail", "messages.send"),
    "hold_flight": ("bookings", "flight_holds.create"),
    "release_flight": ("bookings", "flight_holds.release"),
    "book_hotel": ("bookings", "hotel_bookings.create"),
    "cancel_hotel": ("bookings", "hotel_bookings.cancel"),
}
PROVIDER_OF = {tool: provider for tool, (provider, _) in EFFECTS.items()}
# Faults logged with the key of the request they hit (the others: down, webhooks, lags).
KEYED_FAULTS = frozenset(
    {
        "latency_before_effect",
        "latency_after_effect",
        "drop_after_effect",
        "error_500_before",
        "error_500_after",
        "conflict",
        "rate_limit",
        "reset_before_read",
    }
)
NOT_PROGRESS = (EntryKind.WEBHOOK_RECEIVED, EntryKind.CONFLICT)
EXAMPLES = 10


@dataclass(frozen=True)
class Effect:
    """One effect a provider performed, from its ledger."""

    operation: str
    key: str
    object_id: str
    at: float
    params: Mapping[str, Any]
    extra: Mapping[str, Any]


@dataclass(frozen=True)
class Hit:
    """A process fault that hit a task at ``at``; the task could move again from ``due``."""

    kind: str
    at: float
    task: str
    due: float


@dataclass
class Ledgers:
    """The three providers' ledgers and fault logs, read once the world stopped moving."""

    entries: dict[str, list[dict[str, Any]]]
    fault_logs: dict[str, list[dict[str, Any]]]
    effects: list[Effect] = field(default_factory=list)

    def __post_init__(self) -> None:
        for rows in self.entries.values():
            for row in rows:
                declined = row["operation"] == "payment_intents.create" and (
                    row.get("status") != "succeeded"
                )
                if declined:
                    continue  # a declined card: a request, not an effect
                self.effects.append(
                    Effect(
                        operation=row["operation"],
                        key=row.get("key") or "",
                        object_id=row.get("object_id") or "",
                        at=float(row["at"]),
                        params=row.get("params") or {},
                        extra=row,
                    )
                )

    def by_key(self) -> dict[tuple[str, str], list[Effect]]:
        found: dict[tuple[str, str], list[Effect]] = defaultdict(list)
        for effect in self.effects:
            found[(effect.operation, effect.key)].append(effect)
        return found

    def undone(self, operation: str, object_id: str) -> list[Effect]:
        """The refunds of a payment, the releases of a hold, the cancellations of a booking."""
        if operation == "refunds.create":
            return [
                e
                for e in self.effects
                if e.operation == operation and e.extra.get("payment_intent") == object_id
            ]
        return [e for e in self.effects if e.operation == operation and e.object_id == object_id]

    def faults(self) -> Iterable[tuple[str, dict[str, Any]]]:
        for provider, rows in self.fault_logs.items():
            for row in rows:
                yield provider, row


# --- Business duplicates, from the ledgers alone ------------------------------------------------


def _fold(value: Any) -> str:
    return " ".join(str(value or "").split()).casefold()


def business_duplicates(ledgers: Ledgers) -> list[str]:
    """Each second business effect while a first one stood, described."""
    found: list[str] = []
    undo_of = {
        "payment_intents.create": "refunds.create",
        "flight_holds.create": "flight_holds.release",
        "hotel_bookings.create": "hotel_bookings.cancel",
    }

    def business_object(effect: Effect) -> str | None:
        p = effect.params
        if effect.operation == "payment_intents.create":
            return f"charge for {_fold((p.get('metadata') or {}).get('invoice'))}"
        if effect.operation == "flight_holds.create":
            return f"hold of {_fold(p.get('flight'))} for {_fold(p.get('passenger'))}"
        if effect.operation == "hotel_bookings.create":
            guest = f"{_fold(p.get('guest'))} at {_fold(p.get('hotel'))}"
            return f"room for {guest} from {_fold(p.get('check_in'))}"
        if effect.operation == "messages.send":
            headers = p.get("headers") or {}
            purpose = _fold(headers.get("X-Agentops-Purpose"))
            if purpose.split(" ")[0] in ("receipt", "itinerary", "reminder"):
                return f"{purpose} of {_fold(headers.get('X-Agentops-Reference'))}"
        return None

    standing: dict[str, list[tuple[Effect, float]]] = defaultdict(list)
    for effect in sorted(ledgers.effects, key=lambda e: e.at):
        name = business_object(effect)
        if name is None:
            continue
        undo = undo_of.get(effect.operation)
        ended = float("inf")
        if undo is not None:
            target = effect.object_id
            ends = [u.at for u in ledgers.undone(undo, target)]
            ended = min(ends, default=float("inf"))
        already = [e for e, until in standing[name] if until > effect.at]
        if already:
            found.append(f"a second {name} ({effect.object_id}; first {already[0].object_id})")
        standing[name].append((effect, ended))
    return found


# --- Recovery ---------------------------------------------------------------------------


class Samples(list[dict[str, Any]]):
    """Recovery samples: which fault, which task, when it hit, how long until it moved."""

    def add(self, kind: str, task: str, at: float, took: float | None) -> None:
        self.append({"kind": kind, "task": task, "at": round(at, 3), "took": took})


def _summary_of(samples: Samples) -> dict[str, dict[str, Any]]:
    grouped: dict[str, list[float | None]] = defaultdict(list)
    for sample in samples:
        grouped[sample["kind"]].append(sample["took"])
    out: dict[str, dict[str, Any]] = {}
    for kind, values in sorted(grouped.items()):
        seen = [v for v in values if v is not None]
        out[kind] = {
            "n": len(values),
            "p50": round(statistics.median(seen), 2) if seen else None,
            "max": round(max(seen), 2) if seen else None,
            "never": len(values) - len(seen),
        }
    return out


def _epoch(moment: datetime | None) -> float | None:
    return moment.timestamp() if moment is not None else None


# --- The safe harness: the journal against the ledgers ------------------------------------


def audit_journal(
    *, plan: Plan, task_ids: Sequence[str], ledgers: Ledgers, hits: Sequence[Hit]
) -> dict[str, Any]:
    tasks = {str(t.pk): t for t in Task.objects.filter(pk__in=task_ids)}
    steps = list(
        Step.objects.filter(task_id__in=task_ids, kind=StepKind.CALL).order_by("task_id", "n")
    )
    by_key = ledgers.by_key()
    step_by_key = {s.key: s for s in steps}

    def effects_of(step: Step) -> list[Effect]:
        _, operation = EFFECTS[step.tool]
        return by_key.get((operation, step.key), [])

    intended = [s for s in steps if s.tool in EFFECTS and not s.refusal]
    duplicates = [f"{s.key} ({s.tool}): {len(effects_of(s))} effects" for s in intended]
    duplicates = [d for d, s in zip(duplicates, intended, strict=True) if len(effects_of(s)) > 1]
    # An effect under a key the journal never recorded would be one it cannot account for.
    known = {(EFFECTS[s.tool][1], s.key) for s in intended}
    strangers = [f"{op} under {key!r}" for (op, key) in by_key if (op, key) not in known]

    mismatch = []
    for step in intended:
        count = len(effects_of(step))
        expired_release = step.tool == "release_flight" and step.evidence.get("status") in (
            "expired",
            "released",
        )
        if step.state == StepState.DONE and count != 1 and not (expired_release and count == 0):
            mismatch.append(f"{step.key} ({step.tool}) is done; the provider shows {count}")
        if step.state == StepState.NOT_DONE and count:
            mismatch.append(f"{step.key} ({step.tool}) is not done; the provider shows {count}")

    lost = [
        f"{pk} is {t.status}"
        for pk, t in tasks.items()
        if t.status not in (*FINAL, TaskStatus.NEEDS_HUMAN)
    ]
    open_steps = [s for s in steps if s.state in (StepState.PENDING, StepState.UNKNOWN)]
    flagged = [
        {"task": pk, "code": t.attention_code, "reason": t.attention}
        for pk, t in tasks.items()
        if t.status == TaskStatus.NEEDS_HUMAN
    ]

    # Compensations: every done effect of a saga stands, or is offset exactly once.
    compensation = []
    undo_operation = {
        "charge_customer": ("refunds.create", "payment_intent"),
        "hold_flight": ("flight_holds.release", "id"),
        "book_hotel": ("hotel_bookings.cancel", "id"),
    }
    for step in intended:
        task = tasks[str(step.task_id)]
        if not task.plan or step.state != StepState.DONE or step.tool not in undo_operation:
            continue
        operation, field_name = undo_operation[step.tool]
        undos = ledgers.undone(operation, str(step.evidence.get(field_name)))
        offset = step.offset_by_id is not None
        if task.status == TaskStatus.COMPENSATED:
            expired = step.tool == "hold_flight" and not undos and offset
            good = offset and (len(undos) == 1 or expired)
        elif task.status in FINAL:
            good = not offset and not undos
        else:  # in a person's hands: whatever was done is said so, and done once at most
            good = len(undos) == (1 if offset else 0) or (offset and not undos)
        if not good:
            compensation.append(
                f"{step.key} ({step.tool}) in a {task.status} saga: offset={offset}, "
                f"{len(undos)} undo(s) at the provider"
            )

    # Dropped intents: a transient not-done nobody tried again.
    dropped = []
    for step in steps:
        if step.state != StepState.NOT_DONE or not step.outcome.get("transient"):
            continue
        retried = any(
            s.task_id == step.task_id
            and s.n > step.n
            and s.tool == step.tool
            and s.args == step.args
            and s.retries == step.retries + 1
            for s in steps
        )
        if not retried:
            dropped.append(f"{step.key} ({step.tool}): {step.detail}")

    # Summaries: the one each task finished with, against its journal now.
    untrue = []
    finishes = Step.objects.filter(task_id__in=task_ids, kind=StepKind.FINISH)
    for finish in finishes:
        task = tasks[str(finish.task_id)]
        truth = task_summary(task_facts(task=task).steps)
        if task.status == TaskStatus.COMPENSATED:
            truth = "Compensated. " + truth
        if finish.detail != truth:
            untrue.append(f"{task.pk}: says {finish.detail!r}; the journal says {truth!r}")
    unfinished_over = [
        pk
        for pk, t in tasks.items()
        if t.status in (TaskStatus.FINISHED, TaskStatus.COMPENSATED)
        and not any(f.task_id == t.pk for f in finishes)
    ]
    untrue += [f"{pk} is over without a summary" for pk in unfinished_over]

    samples = _journal_recovery(plan, task_ids, ledgers, hits, step_by_key)
    outcomes = Counter(t.status for t in tasks.values())
    return {
        "tasks": len(plan.tasks),
        "steps": len(steps),
        "intended_effects": len(intended),
        "provider_effects": len(ledgers.effects),
        "duplicates": len(duplicates),
        "business_duplicates": None,  # filled in by the caller, from the ledgers
        "lost": len(lost) + (len(plan.tasks) - len(tasks)),
        "unknown_open": len(open_steps),
        "needs_human": flagged,
        "compensation_mismatch": len(compensation),
        "dropped_intents": len(dropped),
        "untrue_summaries": len(untrue),
        "journal_mismatch": len(mismatch) + len(strangers),
        "outcomes": dict(sorted(outcomes.items())),
        "recovery_s": _summary_of(samples),
        "recovery_samples": samples,
        "examples": {
            name: items[:EXAMPLES]
            for name, items in (
                ("duplicates", duplicates),
                ("lost", lost),
                ("unknown_open", [f"{s.key} ({s.tool}) {s.state}" for s in open_steps]),
                ("compensation_mismatch", compensation),
                ("dropped_intents", dropped),
                ("untrue_summaries", untrue),
                ("journal_mismatch", mismatch + strangers),
            )
            if items
        },
    }


def _journal_recovery(
    plan: Plan,
    task_ids: Sequence[str],
    ledgers: Ledgers,
    hits: Sequence[Hit],
    step_by_key: Mapping[str, Step],
) -> Samples:
    entries: dict[str, list[tuple[float, str, dict[str, Any], int | None]]] = defaultdict(list)
    rows = (
        Entry.objects.filter(task_id__in=task_ids)
        .exclude(kind__in=NOT_PROGRESS)
        .order_by("id")
        .values_list("task_id", "at", "kind", "data", "step_id")
    )
    for task_id, moment, kind, data, step_id in rows:
        entries[str(task_id)].append((moment.timestamp(), kind, data, step_id))
    samples = Samples()
    step_by_id = {s.pk: s for s in step_by_key.values()}

    def settled_for_good(task: str, step_id: int | None, after: float) -> float | None:
        for at, kind, data, sid in entries[task]:
            if at < after or kind != EntryKind.STEP_SETTLED:
                continue
            if step_id is not None and sid != step_id:
                continue
            if data.get("state") == StepState.DONE or (
                data.get("state") == StepState.NOT_DONE and not data.get("transient")
            ):
                return at
        return None

    for provider, row in ledgers.faults():
        if row["fault"] not in KEYED_FAULTS or not row.get("key"):
            continue
        step = step_by_key.get(row["key"])
        if step is None or PROVIDER_OF.get(step.tool) != provider:
            continue
        task = str(step.task_id)
        settled_at = _epoch(step.settled_at)
        if settled_at is not None and settled_at < row["at"]:
            continue  # the step had settled already (a late replay was hit): nothing waited
        moved = settled_for_good(task, step.pk, row["at"])
        samples.add(row["fault"], task, row["at"], None if moved is None else moved - row["at"])

    # A provider that was down: the attempts it refused, and when each task went on.
    downs = [(p, r) for p, r in ledgers.faults() if r["fault"] == "down"]
    for provider, row in downs:
        start, end = row["at"], row["at"] + float(row.get("delay") or 0) + 0.5
        for task, rows_of_task in entries.items():
            for at, kind, data, sid in rows_of_task:
                if kind != EntryKind.ATTEMPT_ENDED or not start <= at <= end:
                    continue
                if data.get("observed") != "NotSent":
                    continue
                refused = step_by_id.get(sid) if sid is not None else None
                if refused is None or PROVIDER_OF.get(refused.tool) != provider:
                    continue
                moved = settled_for_good(task, None, at)
                samples.add("provider_down", task, at, None if moved is None else moved - at)
                break

    for hit in hits:
        later = [at for at, _, _, _ in entries.get(hit.task, []) if at > hit.due]
        samples.add(hit.kind, hit.task, hit.due, min(later) - hit.due if later else None)
    return samples


# --- The naive harness: its own record against the ledgers ----------------------------------


def naive_records(directory: Path, task_names: Sequence[str]) -> dict[str, dict[str, Any]]:
    records = {}
    for name in task_names:
        path = record_path(directory, name)
        if path.exists():
            records[name] = json.loads(path.read_text())
    return records


def audit_naive(
    *,
    plan: Plan,
    task_names: Sequence[str],
    directory: Path,
    ledgers: Ledgers,
    hits: Sequence[Hit],
) -> dict[str, Any]:
    records = naive_records(directory, task_names)
    intent_effects: dict[str, list[Effect]] = defaultdict(list)
    for effect in ledgers.effects:
        if effect.key.startswith("naive:"):
            intent_effects[effect.key.rsplit(":", 1)[0]].append(effect)
    intents = [(name, intent) for name, record in records.items() for intent in record["intents"]]

    def effects_of(name: str, intent: Mapping[str, Any]) -> list[Effect]:
        return intent_effects.get(f"naive:{name}:{intent['n']}", [])

    duplicates = [
        f"naive:{name}:{i['n']} ({i['tool']}): {len(effects_of(name, i))} effects"
        for name, i in intents
        if len(effects_of(name, i)) > 1
    ]
    lost = [name for name in task_names if name not in records]
    dropped = [
        f"naive:{name}:{i['n']} ({i['tool']}) given up after {len(i['attempts'])} errors"
        for name, i in intents
        if not i["ok"]
        and not any(a.get("refused") for a in i["attempts"])
        and not effects_of(name, i)
    ]
    untrue = []
    for name, record in records.items():
        wrong = [i for i in record["intents"] if not i["ok"] and effects_of(name, i)]
        if wrong:
            said = ", ".join(f"{i['tool']} failed" for i in wrong)
            untrue.append(f"{name}: said {said}; the provider performed it ({record['claim']})")

    compensation = []
    undo_operation = {
        "charge_customer": ("refunds.create", "payment_intent"),
        "hold_flight": ("flight_holds.release", None),
        "book_hotel": ("hotel_bookings.cancel", None),
    }
    for name, record in records.items():
        if record["kind"] != "trip":
            continue
        for intent in record["intents"]:
            if intent["tool"] not in undo_operation:
                continue
            operation, _ = undo_operation[intent["tool"]]
            for effect in effects_of(name, intent):
                undos = ledgers.undone(operation, effect.object_id)
                good = len(undos) == (1 if record["outcome"] == "compensated" else 0)
                if not good:
                    compensation.append(
                        f"{effect.object_id} ({intent['tool']}) in a {record['outcome']} trip: "
                        f"{len(undos)} undo(s)"
                    )

    samples = Samples()
    attempts = {a["key"]: (name, i) for name, i in intents for a in i["attempts"]}
    for _provider, row in ledgers.faults():
        if row["fault"] not in KEYED_FAULTS or row.get("key") not in attempts:
            continue
        name, intent = attempts[row["key"]]
        last = intent["attempts"][-1]
        took = last["ended"] - row["at"] if intent["ok"] else None
        samples.add(row["fault"], name, row["at"], took)
    for hit in hits:
        found = records.get(hit.task) or {}
        later = [
            a["started"]
            for i in found.get("intents", [])
            for a in i["attempts"]
            if a["started"] > hit.due
        ]
        samples.add(hit.kind, hit.task, hit.due, min(later) - hit.due if later else None)

    return {
        "tasks": len(plan.tasks),
        "steps": len(intents),
        "intended_effects": len(intents),
        "attempts": sum(len(i["attempts"]) for _, i in intents),
        "provider_effects": len(ledgers.effects),
        "duplicates": len(duplicates),
        "business_duplicates": None,
        "lost": len(lost),
        # It has no "unknown": every error was a failure to it, and nobody is asked.
        "unknown_open": 0,
        "needs_human": [],
        "compensation_mismatch": len(compensation),
        "dropped_intents": len(dropped),
        "untrue_summaries": len(untrue),
        "journal_mismatch": None,
        "outcomes": dict(Counter(r["outcome"] for r in records.values()) | {"lost": len(lost)}),
        "recovery_s": _summary_of(samples),
        "recovery_samples": samples,
        "examples": {
            name: items[:EXAMPLES]
            for name, items in (
                ("duplicates", duplicates),
                ("lost", lost),
                ("compensation_mismatch", compensation),
                ("dropped_intents", dropped),
                ("untrue_summaries", untrue),
            )
            if items
        },
    }


def faults_counted(ledgers: Ledgers, process: Mapping[str, int]) -> dict[str, int]:
    """Every fault the world applied, by kind: the providers' log, and the process faults."""
    counted: Counter[str] = Counter(process)
    for _provider, row in ledgers.faults():
        counted["provider_down" if row["fault"] == "down" else row["fault"]] += 1
    return dict(sorted(counted.items()))
