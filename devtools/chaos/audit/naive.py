"""The naive harness's audit: its loop's own record of each task against the
providers' ledgers (it keeps no journal).
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from devtools.chaos.audit.base import EXAMPLES, KEYED_FAULTS, Hit, Samples, summary_of
from devtools.chaos.ledgers import Effect, Ledgers
from devtools.chaos.naive import record_path
from devtools.chaos.plan import Plan
from devtools.chaos.truth import customer_of, customers_told, summaries_untrue


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
    # The customers told, once, that what was done for them was undone: each trip its
    # operator rejected, or that the loop undid (the kind declares a closing message; the
    # loop has no closing call of its own, so it is counted as not telling them).
    specs = {f"{plan.run}-{spec.n}": spec for spec in plan.tasks}
    owed = {
        customer_of(spec.refs["email"], spec.refs["invoice"])
        for name, record in records.items()
        if (spec := specs.get(name)) is not None
        and spec.kind == "trip"
        and (spec.decision == "reject" or record["outcome"] == "compensated")
    }
    told = customers_told(
        owed=owed,
        compensated={
            f"naive:{name}:": record["outcome"] == "compensated" for name, record in records.items()
        },
        ledgers=ledgers,
        standing={
            customer_of(spec.refs["email"], spec.refs["invoice"])
            for name, record in records.items()
            if (spec := specs.get(name)) is not None
            and spec.kind == "trip"
            and record["outcome"] == "finished"
        },
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
        "customers_owed": told.owed,
        "customers_not_told": len(told.not_told),
        "customers_told_twice": len(told.twice),
        "customers_told_wrongly": len(told.wrongly),
        "model_slips": dict(sorted(slips.items())),
        "outcomes": dict(Counter(r["outcome"] for r in records.values()) | {"lost": len(lost)}),
        "recovery_s": summary_of(samples),
        "recovery_samples": samples,
        "examples": {
            name: items[:EXAMPLES]
            for name, items in (
                ("duplicates", duplicates),
                ("lost", lost),
                ("compensation_mismatch", compensation),
                ("dropped_intents", dropped),
                ("untrue_summaries", untrue),
                ("customers_not_told", told.not_told),
                ("customers_told_twice", told.twice),
                ("customers_told_wrongly", told.wrongly),
            )
            if items
        },
    }
