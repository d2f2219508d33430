"""The mcp harness's answers: every answer its agent was given, against what the
providers did and what agentops settled afterwards (``untrue_answers``).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from devtools.chaos.agent import EFFECTS_FOR, ERROR, Call
from devtools.chaos.ledgers import EFFECTS, Effect, Ledgers, effect_guard, object_form
from journal.models import Step
from journal.outcomes import StepState


def effects_on(ledgers: Ledgers) -> dict[str, list[Effect]]:
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
    on = effects_on(ledgers)
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
