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

from agentops.mcp.selectors import intent_answer
from agentops.models import IntentKey
from devtools.chaos.agent import EFFECTS_FOR, ERROR, Call, Conversation
from devtools.chaos.ledgers import (
    EFFECTS,
    PROVIDER_OF,
    Effect,
    Ledgers,
    business_duplicates,
    by_cause,
    effect_guard,
    object_form,
)
from devtools.chaos.model import SLIPS
from devtools.chaos.naive import record_path
from devtools.chaos.plan import REFUSAL, Plan
from devtools.chaos.truth import summaries_untrue
from journal.keys import object_key
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
    *,
    plan: Plan,
    task_ids: Sequence[str],
    ledgers: Ledgers,
    hits: Sequence[Hit],
    planned: bool = True,
) -> dict[str, Any]:
    """The journal of ``task_ids`` against the ledgers. ``planned``: the run started one task
    per task of the plan (the safe harness), so one it cannot find is lost; the mcp harness's
    tasks are started by its intents, and what is lost is told from its conversations."""
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
        "lost": len(lost) + (len(plan.tasks) - len(tasks) if planned else 0),
        "unknown_open": len(open_steps),
        "needs_human": sum(1 for f in flagged if not f["on_purpose"]),
        "needs_human_on_purpose": sum(1 for f in flagged if f["on_purpose"]),
        "needs_human_expected": plan.refusals,
        "flagged": flagged,
        "compensation_mismatch": len(compensation),
        "dropped_intents": len(dropped),
        "untrue_summaries": len(untrue),
        "journal_mismatch": len(mismatch) + len(strangers),
        "untrue_answers": None,  # no agent is answered (the mcp harness's: audit_mcp)
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
        "untrue_answers": None,
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


# --- The mcp harness: the journal, and every answer its agent was given ------------------------


def _effects_on(ledgers: Ledgers) -> dict[str, list[Effect]]:
    """Each business object's effects at the providers (normal form → effects, by time)."""
    found: dict[str, list[Effect]] = defaultdict(list)
    for effect in sorted(ledgers.effects, key=lambda e: e.at):
        name = object_form(effect_guard(effect))
        if name is not None:
            found[name].append(effect)
    return found


def answers_untrue(
    *,
    calls: Sequence[Call],
    ledgers: Ledgers,
    steps: Mapping[str, Step],
    final: Mapping[str, str],
) -> list[str]:
    """Every answer the agent was given that the providers (and what agentops settled
    afterwards) contradict, one sentence each (``untrue_answers``):

    - ``done``: the reference is a step whose key made exactly one effect at its provider,
      on the intent's object, named by the answer's evidence, still standing;
    - ``not_done``: nothing happened under the reference, and no effect stood on the object
      when the call was made (a refusal said "nothing was done": the same holds of it), unless
      the call was itself wrong (``isError``: its arguments, its key), when it names no object;
    - ``unknown``: allowed only if what it named was settled afterwards — the step it
      references ended done or not done (by its reply or its lookups), or, without a
      reference, the intent's effect did (``final``: each intent's object → the state
      agentops ends with);
    - every ``done`` for one intent names the same effect;
    - an intent or ``check_effect`` answered with an error (the server's, not the
      connection's: a JSON-RPC error, an HTTP error) in place of a state is untrue whatever
      happened: an agent reads it as "failed", and the wire promises three states;
    - ``effects_for``, asked in place of the intent: an effect it lists as done is checked as
      a ``done`` answer.
    """
    by_key = ledgers.by_key()
    on = _effects_on(ledgers)
    untrue: list[str] = []
    told_done: dict[str, set[str]] = defaultdict(set)

    def said(call: Call) -> str:
        return (
            f"{call.conversation} #{call.index} {call.tool}({json.dumps(call.args)}) at "
            f"{call.started:.2f}: {call.status}" + (f" [{call.refused}]" if call.refused else "")
        )

    def check_done(call: Call, reference: str | None, evidence: Mapping[str, Any]) -> None:
        step = steps.get(reference or "")
        if step is None or step.tool not in EFFECTS:
            untrue.append(f"{said(call)}; its reference {reference!r} is no effect's step")
            return
        made = by_key.get((EFFECTS[step.tool][1], step.key), [])
        if len(made) != 1:
            shows = f"the provider shows {len(made)} effect(s) under {step.key}"
            untrue.append(f"{said(call)}; {shows}")
            return
        effect = made[0]
        named = {str(v) for v in evidence.values()}
        if not ledgers.names(effect) & named:
            untrue.append(
                f"{said(call)}; its evidence {dict(evidence)} does not name {effect.object_id}"
            )
        if object_form(effect_guard(effect)) != object_form(call.object):
            untrue.append(f"{said(call)}; {effect.object_id} acted on {effect_guard(effect)!r}")
        if ledgers.undos_of(effect):
            untrue.append(f"{said(call)}; the provider shows {effect.object_id} undone")
        told_done[object_form(call.object) or call.object].add(effect.object_id)

    for call in calls:
        if call.outcome == ERROR and call.tool != EFFECTS_FOR:
            # An error where a state was due: the model reads "failed", whatever happened.
            untrue.append(f"{said(call)}; an error, not one of the three states: {call.reason}")
            continue
        if call.outcome != "answer":
            continue
        if call.tool == EFFECTS_FOR:
            for item in call.found:
                if item.get("status") == "done":
                    check_done(call, item.get("reference"), item.get("evidence") or {})
            continue
        if call.status == "done" and not call.refused:
            check_done(call, call.reference, call.evidence)
        elif call.status == "not_done":
            if call.refused and call.is_error:
                continue  # the call itself was wrong: it names no object, and did nothing
            step = steps.get(call.reference or "")
            if step is not None and step.tool in EFFECTS:
                made = by_key.get((EFFECTS[step.tool][1], step.key), [])
                if made:
                    untrue.append(f"{said(call)}; the provider performed {made[0].object_id}")
            before = [e for e in on.get(object_form(call.object) or "", []) if e.at < call.started]
            standing = [e for e in before if not ledgers.undos_of(e)]
            if standing:
                untrue.append(
                    f"{said(call)}; {standing[0].object_id} stood on {call.object} since "
                    f"{standing[0].at:.2f}"
                )
        elif call.status == "unknown":
            if call.reference:
                step = steps.get(call.reference)
                if step is None:
                    untrue.append(f"{said(call)}; no step has the reference it named")
                elif step.state in (StepState.PENDING, StepState.UNKNOWN):
                    untrue.append(f"{said(call)}; {step.key} was never settled ({step.state})")
            elif final.get(object_form(call.object) or "") not in ("done", "not_done"):
                untrue.append(f"{said(call)}; the intent's effect was never settled")
        else:
            untrue.append(f"{said(call)}; not one of the three states")
    for name, effects in told_done.items():
        if len(effects) > 1:
            untrue.append(f"{name}: told done with different effects {sorted(effects)}")
    return untrue


def mcp_recovery(calls: Sequence[Call], kills: Sequence[float]) -> Samples:
    """For each time the MCP server was killed: each conversation with a call in flight, and
    how long until it was answered again."""
    samples = Samples()
    for at in kills:
        struck = {
            c.conversation
            for c in calls
            if not c.lone and c.started <= at and (c.ended is None or c.ended > at)
        }
        for name in sorted(struck):
            later = [
                c.ended
                for c in calls
                if c.conversation == name and c.outcome == "answer" and c.ended and c.ended > at
            ]
            samples.add("mcp_server_kill", name, at, round(min(later) - at, 3) if later else None)
    return samples


def audit_mcp(
    *,
    plan: Plan,
    task_ids: Sequence[str],
    ledgers: Ledgers,
    hits: Sequence[Hit],
    calls: Sequence[Call],
    conversations: Sequence[Conversation],
    kills: Sequence[float],
) -> dict[str, Any]:
    """The mcp harness: its intents' tasks are audited as the safe harness's are (the journal
    against the ledgers: duplicates, compensations, dropped intents, summaries), and so is
    every answer its agent was given (``untrue_answers``: :func:`answers_untrue`). Lost: a
    conversation that ended without its answers (the run stopped it still asking), or a task
    left neither over nor with a person. Dropped: an intent asked for whose effect never
    happened though the agent was never told it did not."""
    report = audit_journal(plan=plan, task_ids=task_ids, ledgers=ledgers, hits=hits, planned=False)
    references = {c.reference for c in calls if c.reference}
    references |= {str(i.get("reference")) for c in calls for i in c.found if i.get("reference")}
    steps = {s.key: s for s in Step.objects.filter(key__in=references, kind=StepKind.CALL)}
    asked = {object_form(a.object) or a.object: a for c in conversations for a in c.asks}
    rows = list(
        IntentKey.objects.filter(
            key__in=[object_key(f"{a.intent}:{a.object}") for a in asked.values()]
        )
    )
    final = {object_form(row.object) or row.object: intent_answer(row=row).state for row in rows}
    untrue = answers_untrue(calls=calls, ledgers=ledgers, steps=steps, final=final)

    on = _effects_on(ledgers)
    settled_not_done = {
        object_form(c.object) or c.object
        for c in calls
        if c.outcome == "answer" and c.status == "not_done" and not c.refused
    }
    dropped = [
        f"{name}: asked for, never done at the provider, and never told not done"
        for name in asked
        if not on.get(name) and name not in settled_not_done
    ]
    lost = [
        f"{c.name}: {c.failure or f'{len(c.asks) - len(c.settled)} intent(s) without an answer'}"
        for c in conversations
        if c.ended is None or c.failure
    ]

    # Counted by the calls they made, as the other harnesses' are (one slip, one call there):
    # ``twice`` makes the other client's call too (and two agents given one job make that one
    # alone), a cleared context's slip is the first call made after it. So the kinds add up
    # to what became of them.
    slips: Counter[str] = Counter()
    for call in calls:
        if call.slip is None:
            continue
        slips[call.slip] += 1
        if call.outcome != "answer":
            slips[call.outcome] += 1
        elif call.refused:
            slips[f"refused:{call.refused}"] += 1
        elif call.tool == EFFECTS_FOR or call.repeated:
            slips["answered:repeated"] += 1
        else:
            slips["performed"] += 1

    answered = Counter(
        "listed" if c.tool == EFFECTS_FOR and c.outcome == "answer" else c.seen for c in calls
    )
    errors = [
        f"{c.conversation} #{c.index} {c.tool}: {c.reason}" for c in calls if c.outcome == "error"
    ]
    samples = Samples(report.pop("recovery_samples"))
    samples += mcp_recovery(calls, kills)
    report.update(
        tasks=len(conversations),
        lost=report["lost"] + len(lost),
        dropped_intents=report["dropped_intents"] + len(dropped),
        untrue_answers=len(untrue),
        intents=len(asked),
        intent_rows=len(rows),
        mcp_calls=len(calls),
        mcp_answers=dict(sorted(answered.items())),
        model_slips=dict(sorted(slips.items())),
        recovery_s=_summary_of(samples),
        recovery_samples=samples,
    )
    examples = report["examples"]
    for name, items in (
        ("lost", lost),
        ("dropped_intents", dropped),
        ("untrue_answers", untrue),
        ("mcp_errors", errors),
    ):
        if items:
            examples[name] = (examples.get(name, []) + items)[:EXAMPLES]
    return report


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
