"""Acting and asking: perform a recorded step, reconcile an unknown one (DESIGN §4–§5).

Write order is always: the attempt's start is committed → the tool is called → the outcome
is committed. No transaction is open while a tool runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from django.db.models.functions import Now

from journal.leases import Lease
from journal.models import EntryKind, Step
from journal.outcomes import (
    SETTLED_STATES,
    Interrupted,
    Observation,
    Outcome,
    StepState,
    classify,
)
from journal.policy import DEFAULT_POLICY, Policy
from journal.protocols import CostClass, Tool
from journal.record import entry, task_flag
from journal.settle import StepAlreadySettled, step_attempt_start, step_mark_unknown, step_settle


def tool_call(tool: Tool, args: Mapping[str, Any], *, key: str) -> Observation:
    """Call a tool; anything it raises is an interruption, so ``unknown``."""
    try:
        return tool.call(args, key=key)
    except Exception as exc:  # any failure of a call is a fact to classify, not to raise
        return Interrupted(error_class=type(exc).__name__, message=str(exc)[:1000])


def tool_lookup(tool: Tool, args: Mapping[str, Any], *, key: str) -> Outcome | None:
    """Ask the provider about ``key``; a lookup that fails is an ``unknown``, not a 'no'."""
    try:
        return tool.lookup(args, key=key)
    except Exception as exc:  # a failed lookup proves nothing either way
        return Outcome.unknown(
            f"the lookup failed ({type(exc).__name__})", error_class=type(exc).__name__
        )


def _attempt_ended(step: Step, attempt: int, observation: Observation, outcome: Outcome) -> Any:
    return entry(
        kind=EntryKind.ATTEMPT_ENDED,
        task_id=step.task_id,
        step_id=step.pk,
        attempt=attempt,
        observed=type(observation).__name__,
        error_class=getattr(observation, "error_class", ""),
        status=getattr(observation, "status", None),
        code=getattr(observation, "code", ""),
        classified=outcome.state,
    )


def step_perform(
    *, lease: Lease, step: Step, tool: Tool, policy: Policy = DEFAULT_POLICY
) -> Outcome:
    """Run the attempt of ``step`` whose start is already committed, then commit its outcome."""
    attempt = step.attempts
    observation = tool_call(tool, step.args, key=step.key)
    outcome = classify(observation, earlier_attempt=attempt > 1)
    if tool.cost == CostClass.READ and outcome.state == StepState.UNKNOWN:
        # A read has no effect to be unsure about: its failure is a plain failure.
        outcome = Outcome.not_done(f"the read did not complete: {outcome.detail}", **outcome.data)
    ended = _attempt_ended(step, attempt, observation, outcome)
    if outcome.state in SETTLED_STATES:
        step_settle(step_id=step.pk, outcome=outcome, via="attempt", lease=lease, extra=[ended])
    else:
        _unknown(lease=lease, step=step, outcome=outcome, policy=policy, extra=[ended])
    return outcome


def _unknown(
    *,
    lease: Lease,
    step: Step,
    outcome: Outcome,
    policy: Policy,
    extra: list[Any],
    count_round: bool = False,
    give_up: str = "",
) -> None:
    rounds = step.lookups + (1 if count_round else 0)
    delay = None if give_up else _next_delay(policy, rounds)
    reason = give_up or (
        f"step {step.key} is still unknown after {rounds} reconciliation rounds: {outcome.detail}"
    )
    step_mark_unknown(
        lease=lease,
        step=step,
        outcome=outcome,
        next_check_in=delay,
        extra=extra,
        give_up_reason=reason,
        count_round=count_round,
    )


def _next_delay(policy: Policy, rounds_done: int) -> float | None:
    if rounds_done >= len(policy.lookup_schedule):
        return None
    return policy.lookup_schedule[rounds_done]


def _lookup_entries(step: Step, fact: dict[str, Any] | None) -> list[Any]:
    if fact is None:
        return []
    return [entry(kind=EntryKind.LOOKUP, task_id=step.task_id, step_id=step.pk, **fact)]


def key_alive(*, tool: Tool, first_started_at: datetime, now: datetime, policy: Policy) -> bool:
    """Whether the provider still certainly remembers a key first used at ``first_started_at``."""
    trusted = tool.key_lifetime * (1.0 - policy.key_margin)
    return now < first_started_at + trusted


def step_reconcile(
    *, lease: Lease, step: Step, tool: Tool | None, policy: Policy = DEFAULT_POLICY
) -> StepState:
    """One round of finding out what happened to a pending-abandoned or unknown step.

    Look it up by key (full effects) → found: settled. Not found and the key alive → retry
    with the same key and arguments. Not found and the key dead → look again while the
    provider's lookup may still lag, then the task needs a human. Never a new key.
    """
    fresh = Step.objects.annotate(db_now=Now()).get(pk=step.pk)
    if fresh.is_settled:
        return StepState(fresh.state)
    now: datetime = fresh.db_now  # type: ignore[attr-defined]
    if tool is None:
        task_flag(
            lease=lease,
            task_id=step.task_id,
            step_id=step.pk,
            reason=f"step {step.key} is {fresh.state} and its tool {step.tool!r} is not "
            "available to look it up",
        )
        return StepState(fresh.state)
    lookup_fact: dict[str, Any] | None = None
    if tool.cost == CostClass.FULL:
        found = tool_lookup(tool, fresh.args, key=fresh.key)
        settled = found is not None and found.state in SETTLED_STATES
        lookup_fact = {
            "key": fresh.key,
            "found": settled,
            "result": found.state if found is not None else "not_found",
            "detail": found.detail if found is not None else "",
        }
        if found is not None and settled:
            step_settle(
                step_id=fresh.pk,
                outcome=found,
                via="lookup",
                lease=lease,
                extra=_lookup_entries(fresh, lookup_fact),
            )
            return StepState(found.state)
    if fresh.first_started_at is None:  # pragma: no cover - every performed step has one
        raise ValueError(f"step {fresh.key} was never started")
    if tool.cost == CostClass.READ:
        retry = fresh.attempts < policy.read_attempts
    else:
        retry = key_alive(
            tool=tool, first_started_at=fresh.first_started_at, now=now, policy=policy
        )
    if retry:
        try:
            step_attempt_start(lease=lease, step=fresh, lookup=lookup_fact)
        except StepAlreadySettled:
            return StepState(Step.objects.values_list("state", flat=True).get(pk=fresh.pk))
        return StepState(step_perform(lease=lease, step=fresh, tool=tool, policy=policy).state)

    # The key is dead: only a lookup may settle the step now. Keep looking while the
    # provider's lookup may still trail an effect made under the key; then ask a human.
    lag_ends = fresh.first_started_at + tool.key_lifetime + tool.lookup_lag
    give_up = ""
    if not (tool.cost == CostClass.FULL and now < lag_ends and tool.lookup_lag > timedelta(0)):
        give_up = (
            f"step {fresh.key} ({tool.name}) is unknown, the provider no longer remembers its "
            "key, and no lookup found it: a person must check with the provider"
        )
    if fresh.state == StepState.UNKNOWN:
        outcome = Outcome(StepState.UNKNOWN, fresh.detail, fresh.outcome)
    else:  # pending: its runner died during the call
        outcome = Outcome.unknown(
            "the runner stopped during the call; the provider may have processed it"
        )
    _unknown(
        lease=lease,
        step=fresh,
        outcome=outcome,
        policy=policy,
        extra=_lookup_entries(fresh, lookup_fact),
        count_round=True,
        give_up=give_up,
    )
    return StepState.UNKNOWN
