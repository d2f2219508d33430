"""The mcp harness's audit: its intents' tasks as the safe harness's are audited,
every answer its agent was given, its conversations, and how long they waited on the MCP
server after it was killed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from agentops.mcp.selectors import intent_answer
from agentops.models import IntentKey
from devtools.chaos.agent import EFFECTS_FOR, Call, Conversation
from devtools.chaos.audit.answers import answers_untrue, effects_on
from devtools.chaos.audit.base import EXAMPLES, Hit, Samples, summary_of
from devtools.chaos.audit.safe import audit_journal
from devtools.chaos.ledgers import Ledgers, object_form
from devtools.chaos.plan import Plan
from journal.keys import object_key
from journal.models import Step, StepKind


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

    on = effects_on(ledgers)
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
        recovery_s=summary_of(samples),
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
