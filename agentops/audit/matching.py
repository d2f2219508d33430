"""Matching a provider's effects to the journal's steps, by key: pure, facts in, findings out.

The rules, each a :class:`~agentops.audit.models.FindingKind`:

- an effect whose key no step has: ``no_step``;
- several effects of one tool carrying one step's key: each but the step's own (the one its
  evidence names, else the first made) is a ``duplicate``;
- the step's own effect, when the step is
  - ``pending`` or ``unknown``: nothing — the journal is still finding out (reconciliation);
  - ``not_done``: ``not_done`` — it happened, the journal says it certainly did not;
  - ``done``: ``mismatch`` if its tool, amount, currency or recipient is not what the step
    expected (compared only where both sides say); ``offset_unknown`` if the provider shows
    it undone and the journal knows no undo of it (none done, none under way);
    ``offset_missing`` if the journal's undo of it is done and the provider shows it
    standing (not lapsed);
- a ``done`` step of the audited tools, made in the window, that no listed effect carries:
  ``missing`` — unless it settled within the provider's list lag of the window's end.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from agentops.audit.models import FindingKind
from agentops.effects import ProviderEffect


@dataclass(frozen=True)
class StepSide:
    """What the journal says of one step, as the audit compares it."""

    id: int
    task_id: Any
    key: str
    tool: str
    state: str
    args: Mapping[str, Any]
    evidence: Mapping[str, Any]
    undone: bool
    """Its undo is done (``offset_by``)."""
    undoing: bool
    """An undo of it is recorded and may stand (pending, unknown or done)."""
    created_at: datetime | None = None
    settled_at: datetime | None = None

    def shown(self) -> dict[str, Any]:
        return {
            "step": self.key,
            "tool": self.tool,
            "state": self.state,
            "args": dict(self.args),
            "evidence": dict(self.evidence),
            "undone": self.undone,
            "undoing": self.undoing,
            "settled_at": self.settled_at.isoformat() if self.settled_at else None,
        }


@dataclass(frozen=True)
class Found:
    kind: FindingKind
    effect_id: str
    key: str
    summary: str
    step: StepSide | None = None
    effect: ProviderEffect | None = None
    differences: dict[str, Any] = field(default_factory=dict)

    @property
    def natural_key(self) -> tuple[str, str, str]:
        return (str(self.kind), self.effect_id, self.key)

    def provider_side(self) -> dict[str, Any]:
        if self.effect is None:
            return {}
        shown = asdict(self.effect)
        shown["raw"] = dict(self.effect.raw)
        shown["created"] = self.effect.created.isoformat() if self.effect.created else None
        return shown


Expected = Callable[[StepSide], Mapping[str, Any]]


def merged(effects: Iterable[ProviderEffect]) -> list[ProviderEffect]:
    """Each effect once, by the provider's id (a payment listed for itself and again with a
    refund of it), keeping the first listing and any offset another listing saw (with what
    that listing's ``raw`` adds, and the undos it names: each refund's id)."""
    by_id: dict[str, ProviderEffect] = {}
    for effect in effects:
        seen = by_id.get(effect.provider_id)
        if seen is None:
            by_id[effect.provider_id] = effect
        elif effect.offset:
            raw = {**effect.raw, **seen.raw}
            undone_by = tuple(dict.fromkeys(seen.undone_by + effect.undone_by))
            by_id[effect.provider_id] = replace(
                seen, offset=seen.offset or effect.offset, raw=raw, undone_by=undone_by
            )
    return list(by_id.values())


def _same(journal: Any, provider: Any) -> bool:
    if isinstance(journal, str) and isinstance(provider, str):
        return journal.strip().casefold() == provider.strip().casefold()
    return bool(journal == provider)


def differences(
    step: StepSide, effect: ProviderEffect, expected: Mapping[str, Any]
) -> dict[str, Any]:
    """What differs between what the step expected and what the provider shows, where both
    say: ``{"amount": {"journal": 4900, "provider": 5900}}``."""
    found: dict[str, Any] = {}
    if step.tool != effect.tool:
        found["tool"] = {"journal": step.tool, "provider": effect.tool}
    for name in ("amount", "currency", "recipient"):
        mine, theirs = expected.get(name), getattr(effect, name)
        if mine is not None and theirs is not None and not _same(mine, theirs):
            found[name] = {"journal": mine, "provider": theirs}
    return found


def _own(step: StepSide, candidates: Sequence[ProviderEffect]) -> ProviderEffect:
    """Which of several effects carrying the step's key is the step's own: the one its
    evidence names, else the first made."""
    named = {str(v) for v in step.evidence.values() if isinstance(v, str)}
    for effect in candidates:
        if effect.provider_id in named:
            return effect
    return min(
        candidates,
        key=lambda e: (
            e.created is None,
            e.created.timestamp() if e.created else 0.0,
            e.provider_id,
        ),
    )


def _text(amount: Any, currency: Any) -> str:
    return f"{amount} {currency}" if currency else str(amount)


def match(
    *,
    provider: str,
    effects: Iterable[ProviderEffect],
    steps: Mapping[str, StepSide],
    window_done: Iterable[StepSide],
    expected: Expected,
    until: datetime,
    list_lag: timedelta = timedelta(0),
) -> list[Found]:
    """The findings of one provider's listed ``effects`` against the journal.

    ``steps``: the steps the effects' keys name, by key (any age); ``window_done``: the done
    steps of the audited tools made in the window, each judged missing unless listed.
    """
    found: list[Found] = []
    by_key: dict[str, list[ProviderEffect]] = {}
    for effect in merged(effects):
        by_key.setdefault(effect.key, []).append(effect)
    for key, listed in by_key.items():
        step = steps.get(key)
        if step is None:
            for effect in listed:
                found.append(
                    Found(
                        FindingKind.NO_STEP,
                        effect.provider_id,
                        key,
                        f"{provider} shows {effect.tool} {effect.provider_id} carrying key {key}, "
                        "and no step has that key",
                        effect=effect,
                    )
                )
            continue
        own = _own(step, listed)
        for other in listed:
            if other is not own and other.tool == own.tool:
                found.append(
                    Found(
                        FindingKind.DUPLICATE,
                        other.provider_id,
                        key,
                        f"{provider} shows a second {other.tool}, {other.provider_id}, carrying "
                        f"the key of step {key} (its own is {own.provider_id})",
                        step=step,
                        effect=other,
                    )
                )
        found += _judged(provider, step, own, expected(step))
    listed_keys = set(by_key)
    judged_until = until - list_lag
    for step in window_done:
        if step.key in listed_keys:
            continue
        if step.settled_at is not None and step.settled_at > judged_until:
            continue
        evidence = next((str(v) for v in step.evidence.values() if isinstance(v, str)), "")
        found.append(
            Found(
                FindingKind.MISSING,
                evidence,
                step.key,
                f"step {step.key} ({step.tool}) is done"
                + (f" with {evidence}" if evidence else "")
                + f", and {provider} does not show it",
                step=step,
            )
        )
    return found


def _judged(
    provider: str, step: StepSide, effect: ProviderEffect, expected: Mapping[str, Any]
) -> list[Found]:
    if step.state == "not_done":
        return [
            Found(
                FindingKind.NOT_DONE,
                effect.provider_id,
                step.key,
                f"step {step.key} ({step.tool}) is recorded as not done, and {provider} shows "
                f"its effect {effect.provider_id}",
                step=step,
                effect=effect,
            )
        ]
    if step.state != "done":
        return []  # pending or unknown: reconciliation is finding out
    found = []
    diff = differences(step, effect, expected)
    if diff:
        said = "; ".join(
            f"{name} {_text(d['journal'], '')} in the journal, {_text(d['provider'], '')} at "
            f"{provider}"
            for name, d in diff.items()
        )
        found.append(
            Found(
                FindingKind.MISMATCH,
                effect.provider_id,
                step.key,
                f"{effect.provider_id} for step {step.key} differs: {said}",
                step=step,
                effect=effect,
                differences=diff,
            )
        )
    if effect.offset and not step.undone and not step.undoing:
        # One finding for each undo the provider names (a second partial refund of a payment
        # is news of its own), by the undo's id; one by the effect's id when it names none.
        for undo in effect.undone_by or ("",):
            found.append(
                Found(
                    FindingKind.OFFSET_UNKNOWN,
                    undo or effect.provider_id,
                    step.key,
                    f"{effect.provider_id} ({step.tool}, step {step.key}) was {effect.offset} "
                    f"at {provider}" + (f" ({undo})" if undo else "") + ", and the journal "
                    "knows no undo of it",
                    step=step,
                    effect=replace(effect, undone_by=(undo,)) if undo else effect,
                )
            )
    if step.undone and not effect.offset and not effect.lapsed:
        found.append(
            Found(
                FindingKind.OFFSET_MISSING,
                effect.provider_id,
                step.key,
                f"step {step.key} ({step.tool}) was undone in the journal, and {provider} "
                f"shows {effect.provider_id} standing",
                step=step,
                effect=effect,
            )
        )
    return found
