"""The chaos run's verdict: what the harness says happened, against what the providers did.

The providers' ledgers are the ground truth (devtools.chaos.ledgers). From them alone:

- **duplicates**: an intended action (a step's key, a compensation's key; for the naive
  harness, its action ``naive:<task>:<n>``) that took effect more than once — always one
  task's own doing (a retry after a fault, its model calling again);
- **business duplicates**: a second standing charge for one invoice, a second receipt,
  itinerary or reminder N of one reference, a second standing flight hold for one passenger
  and flight, or hotel booking for one guest, hotel and night, with its cause: one task's
  faults, two tasks asked for the same thing on purpose, or a task acting on another's
  object (``business_duplicates_by_cause``).

Against the journal (or the naive loop's own record):

- **lost**: a task with no final state and no flag for a human;
- **unknown_open**: steps still unknown (or in flight) at the end;
- **needs_human**: tasks left needing a person that the plan did not hand over on purpose
  (``needs_human_on_purpose``: those it did, by refusing us; ``flagged``: each, with its
  code and sentence);
- **compensation_mismatch**: an effect of a saga neither standing (the saga finished) nor
  offset exactly once (it was compensated), by the providers' account;
- **dropped_intents**: an effect a task meant to make that ended not done for a passing
  reason and was never tried again;
- **untrue_summaries**: a task whose summary — as it was told — disagrees with the ledgers
  (devtools.chaos.truth, the same check for both harnesses);
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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from devtools.chaos.ledgers import (
    EFFECTS,
    PROVIDER_OF,
    Effect,
    Ledgers,
    business_duplicates,
    by_cause,
)
from devtools.chaos.model import SLIPS
from devtools.chaos.naive import record_path
from devtools.chaos.plan import REFUSAL, Plan
from devtools.chaos.truth import summaries_untrue
from journal.models import Attention, Entry, EntryKind, Step, StepKind, Task, TaskStatus
from journal.outcomes import StepState
from journal.protocols import CORRECTABLE
from journal.status import FINAL

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
class Hit:
    """A process fault that hit a task at ``at``; the task could move again from ``due``."""

    kind: str
    at: float
    task: str
    due: float


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
    # The tasks the plan hands to a person on purpose: those whose charge it refused us for.
    refused_keys = {
        row.get("key")
        for provider, row in ledgers.faults()
        if (provider, row.get("operation"), row["fault"]) == REFUSAL
    }
    on_purpose = {str(s.task_id) for s in steps if s.key in refused_keys}
    flagged = [
        {
            "task": pk,
            "code": t.attention_code,
            "reason": t.attention,
            "on_purpose": pk in on_purpose and t.attention_code == Attention.MISCONFIGURED,
        }
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

    # Summaries: the one each task finished with, as it was told, against the ledgers.
    finishes = {
        str(task_id): detail
        for task_id, detail in Step.objects.filter(
            task_id__in=task_ids, kind=StepKind.FINISH
        ).values_list("task_id", "detail")
    }
    untrue = summaries_untrue(
        finishes, key_prefix={pk: f"ao:{pk}:" for pk in tasks}, ledgers=ledgers
    )
    untrue += [
        f"{pk} is over without a summary"
        for pk, t in tasks.items()
        if t.status in (TaskStatus.FINISHED, TaskStatus.COMPENSATED) and pk not in finishes
    ]

    # The model's slips, and what the harness answered (a refusal: nothing was sent).
    slips: Counter[str] = Counter()
    unwound: set[str] = set()
    for step in steps:
        how = step.decision.get("chaos") if isinstance(step.decision, dict) else None
        if how in SLIPS:
            slips[how] += 1
            slips[f"refused:{step.refusal}" if step.refusal else "performed"] += 1
            # A saga takes a refusal it cannot correct to mean the step cannot happen.
            task = tasks[str(step.task_id)]
            cannot_correct = step.refusal and step.refusal not in CORRECTABLE
            if cannot_correct and task.status == TaskStatus.COMPENSATED:
                unwound.add(str(step.task_id))
    if unwound:
        slips["sagas_unwound"] = len(unwound)

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
        "needs_human": sum(1 for f in flagged if not f["on_purpose"]),
        "needs_human_on_purpose": sum(1 for f in flagged if f["on_purpose"]),
        "needs_human_expected": plan.refusals,
        "flagged": flagged,
        "compensation_mismatch": len(compensation),
        "dropped_intents": len(dropped),
        "untrue_summaries": len(untrue),
        "journal_mismatch": len(mismatch) + len(strangers),
        "model_slips": dict(sorted(slips.items())),
        "outcomes": dict(sorted(outcomes.items())),
        "recovery_s": _summary_of(samples),
        "recovery_samples": samples,
        "examples": {
            name: items[:EXAMPLES]
            for name, items in (
                ("duplicates", duplicates),
                ("lost", lost),
                ("unknown_open", [f"{s.key} ({s.tool}) {s.state}" for s in open_steps]),
                (
                    "needs_human",
                    [f"{f['task']} [{f['code']}] {f['reason']}" for f in flagged],
                ),
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
        and not i.get("forgotten")
        and not any(a.get("refused") for a in i["attempts"])
        and not effects_of(name, i)
    ]
    untrue = summaries_untrue(
        {name: record["summary"] for name, record in records.items()},
        key_prefix={name: f"naive:{name}:" for name in records},
        ledgers=ledgers,
    )
    # The model's slips, and what the loop did with them: a slipped call its framework
    # refused (the arguments do not fit the tool), or one it sent.
    slips: Counter[str] = Counter()
    for _name, intent in intents:
        for how in intent.get("slips") or []:
            slips[how] += 1
        for attempt in intent["attempts"]:
            if attempt.get("slip"):
                slips["performed" if attempt["sent"] else "refused:invalid_arguments"] += 1

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
        "needs_human": 0,
        "needs_human_on_purpose": 0,
        "needs_human_expected": plan.refusals,
        "flagged": [],
        "compensation_mismatch": len(compensation),
        "dropped_intents": len(dropped),
        "untrue_summaries": len(untrue),
        "journal_mismatch": None,
        "model_slips": dict(sorted(slips.items())),
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


# --- Both: business duplicates and their causes ------------------------------------------------


def duplicates_figures(
    *, plan: Plan, ledgers: Ledgers, owner: Callable[[str], int | None]
) -> dict[str, Any]:
    """``business_duplicates``, by cause (devtools.chaos.ledgers), and examples. ``owner``:
    which task of the plan (its ``n``) an effect's key belongs to."""
    root: dict[int, int] = {}
    for spec in plan.tasks:  # a task asked for twice names the one it repeats, earlier
        root[spec.n] = root.get(spec.repeats, spec.repeats) if spec.repeats else spec.n
    found = business_duplicates(
        ledgers, owner=owner, asked_twice=lambda a, b: root.get(a) == root.get(b)
    )
    return {
        "business_duplicates": len(found),
        "business_duplicates_by_cause": by_cause(found),
        "examples": [str(d) for d in found[:EXAMPLES]],
    }
