"""Acting and asking: perform a recorded step, reconcile an unknown one (docs/design.md §4–§5).

Write order is always: the attempt's start is committed → the tool is called → the outcome
is committed. No transaction is open while a tool runs.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from django.db.models.functions import Now

from journal.entries import note
from journal.events import StepEvent, step_event
from journal.leases import Lease
from journal.models import Attention, Entry, EntryKind, Step
from journal.outcomes import (
    SETTLED_STATES,
    Interrupted,
    Observation,
    Outcome,
    StepState,
    classify,
    proven,
)
from journal.policy import DEFAULT_POLICY, Policy
from journal.protocols import CostClass, Tool
from journal.reconcile import Next, next_check_in, reconcile_next
from journal.settle import StepAlreadySettled, step_attempt_start, step_mark_unknown, step_settle
from journal.status import task_flag


def tool_call(tool: Tool, args: Mapping[str, Any], *, key: str) -> Observation:
    """Call a tool; anything it raises is an interruption, so ``unknown``."""
    try:
        return tool.call(args, key=key)
    except Exception as exc:  # any failure of a call is a fact to classify, not to raise
        return Interrupted(error_class=type(exc).__name__, message=str(exc)[:1000])


def tool_lookup(tool: Tool, args: Mapping[str, Any], *, key: str) -> Outcome | None:
    """Ask the provider about ``key``; a lookup that fails is an ``unknown``, not a 'no', and
    one that finds it done without its evidence proves nothing either."""
    try:
        found = tool.lookup(args, key=key)
    except Exception as exc:  # a failed lookup proves nothing either way
        return Outcome.unknown(
            f"the lookup failed ({type(exc).__name__})", error_class=type(exc).__name__
        )
    return None if found is None else proven(found, tool.evidence)


def _attempt_facts(attempt: int, observation: Observation, outcome: Outcome) -> dict[str, Any]:
    """How an attempt ended: what it saw (the raw error class) and how it was classified."""
    return {
        "attempt": attempt,
        "observed": type(observation).__name__,
        "error_class": getattr(observation, "error_class", ""),
        "status": getattr(observation, "status", None),
        "code": getattr(observation, "code", ""),
        "classified": outcome.state,
    }


def _attempt_ended(facts: dict[str, Any]) -> dict[str, Any]:
    return note(EntryKind.ATTEMPT_ENDED, **facts)


def step_perform(
    *,
    lease: Lease,
    step: Step,
    tool: Tool,
    policy: Policy = DEFAULT_POLICY,
    defer: bool = False,
) -> Outcome:
    """Run the attempt of ``step`` whose start is already committed, then commit its outcome.
    ``defer``: a settled outcome is held back on the lease and committed with the holder's
    next write (the runner's next record: one commit per step; journal.settle.step_settle)."""
    attempt = step.attempts
    started = time.monotonic()
    observation = tool_call(tool, step.args, key=step.key)
    seconds = time.monotonic() - started
    outcome = classify(observation, earlier_attempt=attempt > 1, evidence=tool.evidence)
    if step.cost == CostClass.READ and outcome.state == StepState.UNKNOWN:
        # A read has no effect to be unsure about. One that did not complete (a timeout, a
        # 500) is simply tried again, as reconciliation does for reads, while it has
        # attempts left (policy.read_attempts); after that its failure is a plain failure.
        flagged = outcome.data.get("bug") or outcome.data.get("misconfigured")
        if flagged or attempt >= policy.read_attempts:
            outcome = Outcome.not_done(
                f"the read did not complete: {outcome.detail}", **outcome.data
            )
    facts = _attempt_facts(attempt, observation, outcome)
    if outcome.state in SETTLED_STATES:
        # One entry says it all: the attempt ended so, and the step settled so.
        settled = step_event(
            "settled",
            step,
            state=outcome.state,
            via="attempt",
            attempt=attempt,
            seconds=seconds,
            maybe_unknown=attempt > 1 or step.lookups > 0,
        )
        step_settle(
            step_id=step.pk,
            outcome=outcome,
            via="attempt",
            lease=lease,
            attempt=facts,
            defer=defer,
            event=settled,
        )
        return outcome
    ended = _attempt_ended(facts)
    told = [
        step_event("attempt_ended", step, state=outcome.state, attempt=attempt, seconds=seconds)
    ]
    if outcome.data.get("bug"):
        # The provider says the key was used with other arguments. Arguments are frozen, so
        # this is a bug of ours, and the first use may have acted: a person must look.
        step_mark_unknown(
            lease=lease,
            step=step,
            outcome=outcome,
            next_check_in=None,
            notes=[ended],
            told=told,
            give_up=(
                Attention.KEY_MISUSED,
                f"step {step.key} ({step.tool}): {outcome.detail}; a person must check with the "
                "provider",
            ),
        )
    elif outcome.data.get("misconfigured"):
        # Our retry was refused before the provider looked at it; the first attempt may have
        # acted. Retrying cannot help until a person fixes our side: then a lookup settles it.
        step_mark_unknown(
            lease=lease,
            step=step,
            outcome=outcome,
            next_check_in=None,
            notes=[ended],
            told=told,
            give_up=(
                Attention.MISCONFIGURED,
                f"step {step.key} ({step.tool}): {outcome.detail}. Fix the configuration, then "
                "resume the task: the step is looked up again, never sent under a new key",
            ),
        )
    else:
        _unknown(lease=lease, step=step, outcome=outcome, policy=policy, notes=[ended], told=told)
    return outcome


def _unknown(
    *,
    lease: Lease,
    step: Step,
    outcome: Outcome,
    policy: Policy,
    notes: list[dict[str, Any]],
    told: list[StepEvent],
    count_round: bool = False,
    give_up: tuple[Attention, str] | None = None,
) -> None:
    rounds = step.lookups + (1 if count_round else 0)
    delay = None if give_up else next_check_in(rounds_done=rounds, schedule=policy.lookup_schedule)
    if delay is None and give_up is None:
        give_up = (
            Attention.ROUNDS_EXHAUSTED,
            f"step {step.key} ({step.tool}) is still unknown after {rounds} reconciliation "
            f"rounds: {outcome.detail}",
        )
    step_mark_unknown(
        lease=lease,
        step=step,
        outcome=outcome,
        next_check_in=delay,
        notes=notes,
        told=told,
        give_up=give_up,
        count_round=count_round,
    )


def _lookup_notes(fact: dict[str, Any] | None) -> list[dict[str, Any]]:
    return [] if fact is None else [note(EntryKind.LOOKUP, **fact)]


# A lookup's finding as the lookup's note says it → what its event tells.
LOOKUP_RESULTS = {"done": "done", "not_done": "not_done", "not_found": "not_found"}


def _lookup_told(step: Step, fact: dict[str, Any] | None, *, state: str) -> list[StepEvent]:
    """The lookup ``fact`` as an event (none if there was no lookup), leaving the step in
    ``state``."""
    if fact is None:
        return []
    result = LOOKUP_RESULTS.get(str(fact["result"]), "failed")
    return [step_event("lookup", step, state=state, result=result)]


def _who_ran(step: Step, lease: Lease) -> str:
    """Who recorded ``step`` (its runner, with the version it ran, as its record's entry
    says) and who runs it now: what an operator needs after a deploy changed its tool."""
    by = (
        Entry.objects.filter(task_id=step.task_id, step_id=step.pk, kind=EntryKind.STEP_RECORDED)
        .values_list("data__by", flat=True)
        .first()
    )
    return f"recorded by {by or 'a runner that did not say which'}, run now by {lease.owner}"


def step_reconcile(
    *, lease: Lease, step: Step, tool: Tool | None, policy: Policy = DEFAULT_POLICY
) -> StepState:
    """One round of finding out what happened to a pending-abandoned or unknown step.

    Look it up by key (full effects), then let :func:`journal.reconcile.reconcile_next`
    decide from the step's own record: settle with what was found; retry with the same key
    and arguments while the key is trusted; look again later while the provider's lookup
    may lag; or hand the task to a human. Never a new key.
    """
    fresh = Step.objects.annotate(db_now=Now()).get(pk=step.pk)
    if fresh.is_settled:
        return StepState(fresh.state)
    now: datetime = fresh.db_now  # type: ignore[attr-defined]
    if tool is None:
        task_flag(
            lease=lease,
            step_id=step.pk,
            code=Attention.TOOL_MISSING,
            reason=f"step {step.key} is {fresh.state} and its tool {step.tool!r} is not "
            f"available to look it up: {_who_ran(fresh, lease)}, which has no tool of that "
            "name (renamed or removed since?). Nothing was sent again: run a version that has "
            "it, or find out at the provider and settle the step by hand",
        )
        return StepState(fresh.state)
    found: Outcome | None = None
    lookup_fact: dict[str, Any] | None = None
    if fresh.cost == CostClass.FULL:
        found = tool_lookup(tool, fresh.args, key=fresh.key)
        lookup_fact = {
            "key": fresh.key,
            "found": found is not None and found.state in SETTLED_STATES,
            "result": found.state if found is not None else "not_found",
            "detail": found.detail if found is not None else "",
        }
    verdict = reconcile_next(
        found=StepState(found.state) if found is not None else None,
        cost=fresh.cost,
        now=now,
        key_trusted_until=fresh.key_trusted_until,
        lookup_until=fresh.lookup_until,
        attempts=fresh.attempts,
        read_attempts=policy.read_attempts,
        rounds_done=fresh.lookups,
        rounds_planned=len(policy.lookup_schedule),
    )
    if verdict.next == Next.SETTLE and found is not None:
        step_settle(
            step_id=fresh.pk,
            outcome=found,
            via="lookup",
            lease=lease,
            notes=_lookup_notes(lookup_fact),
            lookup=True,  # a reconciliation round, counted like one that did not settle it
            told=_lookup_told(fresh, lookup_fact, state=found.state),
            event=step_event("settled", fresh, state=found.state, via="lookup", maybe_unknown=True),
        )
        return StepState(found.state)
    if verdict.next == Next.RETRY:
        refused = tool.validate(fresh.args)
        if refused:
            # The frozen arguments go again under the same key, or not at all: a tool whose
            # schema changed since (a deploy) never gets them rewritten, and never a new key.
            task_flag(
                lease=lease,
                step_id=step.pk,
                code=Attention.TOOL_MISSING,
                reason=f"step {fresh.key} ({fresh.tool}) is {fresh.state} and would be sent "
                f"again with its frozen arguments, which {fresh.tool} refuses now "
                f"({refused[0]}): {_who_ran(fresh, lease)}. Nothing was sent again: run a "
                "version whose tool takes them, or find out at the provider and settle the "
                "step by hand",
            )
            return StepState(fresh.state)
        try:
            step_attempt_start(
                lease=lease,
                step=fresh,
                lookup=lookup_fact,
                told=_lookup_told(fresh, lookup_fact, state=StepState.PENDING),
            )
        except StepAlreadySettled:
            return StepState(Step.objects.values_list("state", flat=True).get(pk=fresh.pk))
        return StepState(step_perform(lease=lease, step=fresh, tool=tool, policy=policy).state)
    if fresh.state == StepState.UNKNOWN:
        outcome = Outcome(StepState.UNKNOWN, fresh.detail, fresh.outcome)
    else:  # pending: its runner died during the call
        outcome = Outcome.unknown(
            "the runner stopped during the call; the provider may have processed it"
        )
    give_up = None
    if verdict.next == Next.HUMAN:
        code = verdict.code or Attention.ROUNDS_EXHAUSTED
        give_up = (code, f"step {fresh.key} ({fresh.tool}) is unknown: {verdict.why}")
    _unknown(
        lease=lease,
        step=fresh,
        outcome=outcome,
        policy=policy,
        notes=_lookup_notes(lookup_fact),
        told=_lookup_told(fresh, lookup_fact, state=StepState.UNKNOWN),
        count_round=True,
        give_up=give_up,
    )
    return StepState.UNKNOWN
