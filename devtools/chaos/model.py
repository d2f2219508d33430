"""The model of a chaos run: the playbooks, slipping as the models agentops contains do.

After trouble — an error, a call that was unknown for a while, a refusal — a model sometimes
calls again with its arguments rephrased (an amount of 4900 written ``"49.00"``, a subject
reworded, a date written out, a flight number with a space), sometimes names a neighbouring
object (``INV-…-7`` for ``INV-…-6``, the next traveller), and sometimes forgets what it did
(a cleared context: it starts the task over). Whether it slips, and how, is decided by
dice seeded with the run's seed and the situation, so a run can be replayed; a task slips
:attr:`Model.most` times at most (a model that was corrected twice follows its playbook).

Both harnesses have this model. The safe harness's workers are given it as a planner
wrapper (``AGENTOPS_PLANNER_WRAPPERS=devtools.chaos.model.misbehaving``, read by
agentops.planners.planner_get); the naive loop asks it after each error
(devtools.chaos.naive). Each slipped call is marked ``{"chaos": <slip>}`` in the decision
the journal keeps, so the audit counts them and what the harness answered.
"""

from __future__ import annotations

import json
import os
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import date, timedelta
from typing import Any

from agentops.effects import registry
from agentops.planners.scripted import ScriptedPlanner
from journal.keys import KEY_PREFIX
from journal.outcomes import StepState
from journal.protocols import (
    GUARD_REFUSALS,
    Call,
    Decision,
    Planner,
    Refusal,
    StepFact,
    TaskFacts,
)

MODEL_VARIABLE = "AGENTOPS_CHAOS_MODEL"
WRAPPER = "devtools.chaos.model.misbehaving"
REPHRASE, NEIGHBOUR, FORGET = "rephrase", "neighbour", "forget"
SLIPS = (REPHRASE, NEIGHBOUR, FORGET)
# Refusals of a call's form or of its belonging to the task: the model reads them and goes
# back to its playbook (they are hidden from the playbook, which never makes them).
CORRECTED = (Refusal.UNKNOWN_TOOL, Refusal.INVALID_ARGUMENTS, Refusal.NOT_THIS_TASKS)
# Which argument names the object a neighbouring call gets wrong, by the tool's arguments.
NAMES = ("invoice", "reference", "passenger", "guest")


@dataclass(frozen=True)
class Model:
    """How often a model slips after trouble (``rate``), how (``weights``, in the order of
    :data:`SLIPS`), and how many times per task at most."""

    seed: int
    rate: float = 0.3
    weights: tuple[float, float, float] = (0.4, 0.3, 0.3)
    most: int = 2

    def env(self) -> dict[str, str]:
        return {MODEL_VARIABLE: json.dumps({"seed": self.seed, "rate": self.rate})}

    @classmethod
    def from_env(cls) -> Model | None:
        raw = os.environ.get(MODEL_VARIABLE, "")
        if not raw:
            return None
        spec = json.loads(raw)
        return cls(seed=int(spec["seed"]), rate=float(spec["rate"]))

    def slip(self, situation: str, slipped: int) -> str | None:
        """Whether, and how, the model slips in ``situation`` (a text that names it: the
        task's references and how far it got), having slipped ``slipped`` times already."""
        if slipped >= self.most or self.rate <= 0:
            return None
        dice = random.Random(f"{self.seed}:{situation}")  # noqa: S311 - replayable, not secret
        if dice.random() >= self.rate:
            return None
        return dice.choices(SLIPS, self.weights)[0]


def situation(kind: str, refs: Mapping[str, Any], *where: object) -> str:
    return ":".join([kind, json.dumps(refs, sort_keys=True), *(str(w) for w in where)])


# --- How a model gets arguments wrong -----------------------------------------------------------


def _reworded(subject: str) -> str:
    return f"Following up: {subject[:1].lower()}{subject[1:]}"


def _spelled_out(day: str) -> str:
    try:
        return f"{date.fromisoformat(day):%-d %B %Y}"
    except ValueError:
        return day + " (as agreed)"


def rephrased(args: Mapping[str, Any]) -> dict[str, Any]:
    """The same call as a model writes it the second time: the amount in major units as
    text, the subject reworded, dates spelled out, a space in the flight number."""
    out = dict(args)
    if isinstance(out.get("amount"), int):
        out["amount"] = f"{out['amount'] / 100:.2f}"
    for name in ("subject", "description"):
        if isinstance(out.get(name), str):
            out[name] = _reworded(out[name])
    for name in ("check_in", "check_out"):
        if isinstance(out.get(name), str):
            out[name] = _spelled_out(out[name])
    if isinstance(out.get("flight"), str):
        out["flight"] = f"{out['flight'][:2]} {out['flight'][2:]}"
    return out


def neighbouring(args: Mapping[str, Any]) -> dict[str, Any]:
    """The same call naming the neighbouring object: the invoice, reference, passenger or
    guest whose last number is one more (another task's, often)."""
    out = dict(args)
    for name in NAMES:
        value = out.get(name)
        if isinstance(value, str) and re.search(r"\d+$", value):
            out[name] = re.sub(r"\d+$", lambda m: str(int(m.group()) + 1), value)
            return out
    return out


# --- The safe harness's planner -----------------------------------------------------------------


def _own_key(facts: TaskFacts) -> str:
    return f"{KEY_PREFIX}:{facts.task_id}:"


def corrected(facts: TaskFacts, slipped: frozenset[int] | None = None) -> TaskFacts:
    """The facts as the model reads them once corrected: the refusals of its own slips are
    noted and set aside (``slipped``: the ``n`` of its slipped calls; when not known, every
    refusal a slip can earn — a call in the wrong form, on another's object, over a limit,
    or again on what the task did already); everything else stands."""
    own = _own_key(facts)

    def slip_refused(s: StepFact) -> bool:
        if not s.refusal:
            return False
        if slipped is not None:
            return s.n in slipped
        return s.refusal in (*CORRECTED, Refusal.LIMIT) or (
            s.refusal in GUARD_REFUSALS and s.refused_by.startswith(own)
        )

    return replace(facts, steps=[s for s in facts.steps if not slip_refused(s)])


@dataclass(frozen=True)
class History:
    """What the planner reads of the journal beyond the facts: which steps were ever
    unknown (looked up), and how many of the task's calls were slips."""

    looked_up: frozenset[int]
    slipped: frozenset[int]


def _history(facts: TaskFacts) -> History | None:
    # Read only when a chaos run asks (never in production); None when the database is
    # away (a restart): the model then slips as though nothing had been looked up.
    from django.db import DatabaseError

    from journal.models import Step, StepKind

    try:
        rows = list(
            Step.objects.filter(task_id=facts.task_id, kind=StepKind.CALL).values_list(
                "n", "lookups", "decision"
            )
        )
    except DatabaseError:
        return None
    return History(
        looked_up=frozenset(n for n, lookups, _ in rows if lookups),
        slipped=frozenset(
            n for n, _, decision in rows if isinstance(decision, dict) and "chaos" in decision
        ),
    )


# The tools the playbooks call (the undos are the harness's, never the model's).
PLANNED = frozenset({"charge_customer", "send_email", "hold_flight", "book_hotel"})


class Misbehaving:
    """The scripted playbooks (agentops.planners.scripted), slipping after trouble."""

    max_duration = timedelta(0)

    def __init__(self, model: Model) -> None:
        self.model = model

    def decide(self, facts: TaskFacts) -> Decision:
        history = _history(facts) if facts.steps else History(frozenset(), frozenset())
        how = self._slip(facts, history)
        if how == FORGET:
            return _marked(registry.playbooks[facts.kind](replace(facts, steps=[])), FORGET)
        last = facts.steps[-1] if facts.steps else None
        if how in (REPHRASE, NEIGHBOUR) and last is not None and last.tool in PLANNED:
            change = rephrased if how == REPHRASE else neighbouring
            return Call(last.tool, change(last.args), raw={"chaos": how})
        slipped = history.slipped if history is not None else None
        return _marked(registry.playbooks[facts.kind](corrected(facts, slipped)), "playbook")

    def _slip(self, facts: TaskFacts, history: History | None) -> str | None:
        """How the model slips now, if it does: only after trouble with the last call (it
        did not happen, it took the harness's retries, or it was unknown for a while)."""
        if not facts.steps:
            return None
        last = facts.steps[-1]
        looked_up = history is not None and last.n in history.looked_up
        if last.state == StepState.DONE and not last.retries and not looked_up:
            return None
        if history is not None:
            slipped = len(history.slipped)
        else:
            slipped = len(facts.steps) - len(corrected(facts).steps)
        return self.model.slip(situation(facts.kind, facts.refs, len(facts.steps)), slipped)


def _marked(decision: Decision, how: str) -> Decision:
    if isinstance(decision, Call):
        raw = {"chaos": how} if how in SLIPS else {"playbook": how}
        return Call(decision.tool, decision.args, raw=raw)
    return decision


def misbehaving(planner: Planner) -> Planner:
    """The planner wrapper (``AGENTOPS_PLANNER_WRAPPERS``): with ``AGENTOPS_CHAOS_MODEL``
    set, the scripted planner slips as :class:`Model` says; without it, ``planner``
    untouched."""
    model = Model.from_env()
    if model is None:
        return planner
    if not isinstance(planner, ScriptedPlanner):
        raise ValueError("the chaos run's model stands in for PLANNER=scripted only")
    return Misbehaving(model)
