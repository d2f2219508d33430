"""Recovery in the journal (the safe and mcp harnesses): for each fault that hit a
task, how long until the task moved again — for a provider fault, the step it hit settling
(done, or not done for good); for a process fault, the first thing a runner writes for the
task after it (counted from when the task was due, if it was waiting).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from devtools.chaos.audit.base import KEYED_FAULTS, Hit, Samples
from devtools.chaos.ledgers import PROVIDER_OF, Ledgers
from devtools.chaos.plan import Plan
from journal.models import Entry, EntryKind, Step
from journal.outcomes import StepState

NOT_PROGRESS = (EntryKind.WEBHOOK_RECEIVED, EntryKind.CONFLICT)


def _epoch(moment: datetime | None) -> float | None:
    return moment.timestamp() if moment is not None else None


def journal_recovery(
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
