"""The safe harness's audit: the journal of its tasks against the providers'
ledgers (also the first half of the mcp harness's, whose intents start tasks of their own).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from agentops.kinds import kind_get
from devtools.chaos.audit.base import EXAMPLES, Hit, summary_of
from devtools.chaos.audit.recovery import journal_recovery
from devtools.chaos.ledgers import EFFECTS, Effect, Ledgers
from devtools.chaos.model import SLIPS
from devtools.chaos.plan import REFUSAL, Plan
from devtools.chaos.truth import Customer, customer_of, customers_told, summaries_untrue
from journal.models import Attention, Step, StepKind, Task, TaskStatus
from journal.outcomes import StepState
from journal.protocols import CORRECTABLE
from journal.selectors import task_facts
from journal.status import FINAL


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

    # The customers told, once, that what was done for them was undone.
    told = customers_told(
        owed=closings_owed(plan, tasks.values()),
        compensated={f"ao:{pk}:": t.status == TaskStatus.COMPENSATED for pk, t in tasks.items()},
        ledgers=ledgers,
        standing={
            customer_of(t.refs.get("email"), t.refs.get("invoice"))
            for t in tasks.values()
            if t.status == TaskStatus.FINISHED and t.plan and isinstance(t.refs, dict)
        },
    )

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

    samples = journal_recovery(plan, task_ids, ledgers, hits, step_by_key)
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
        "customers_owed": told.owed,
        "customers_not_told": len(told.not_told),
        "customers_told_twice": len(told.twice),
        "customers_told_wrongly": len(told.wrongly),
        "model_slips": dict(sorted(slips.items())),
        "outcomes": dict(sorted(outcomes.items())),
        "recovery_s": summary_of(samples),
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
                ("customers_not_told", told.not_told),
                ("customers_told_twice", told.twice),
                ("customers_told_wrongly", told.wrongly),
            )
            if items
        },
    }


def closings_owed(plan: Plan, tasks: Iterable[Task]) -> set[Customer]:
    """The customers the journal's ``tasks`` owe a closing message: each trip of the plan
    that ran here and that its operator rejects (the plan says so, whatever the journal
    says), and each task that ended compensated whose kind's closing call has something to
    say (a trip cancelled; a renewal whose charge a person's compensation refunded)."""
    ran = list(tasks)
    invoices = {str(t.refs.get("invoice")) for t in ran if isinstance(t.refs, dict)}
    owed = {
        customer_of(spec.refs["email"], spec.refs["invoice"])
        for spec in plan.tasks
        if spec.decision == "reject" and spec.refs.get("invoice") in invoices
    }
    for task in ran:
        closing = kind_get(task.kind).closing
        if task.status != TaskStatus.COMPENSATED or closing is None:
            continue
        args = closing.args(task.refs, task_facts(task=task))
        if args is not None:
            owed.add(customer_of(args.get("to"), args.get("reference")))
    return owed
