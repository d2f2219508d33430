"""The provider audit's findings as people read them: each kind in words (its code beside),
what the provider shows and what the journal says side by side, the fields that differ
marked, money in major units with its currency and instants as times — never ``12099 eur``
beside ``120.99 EUR``, or epoch seconds.

Presentation only: the findings are stored as the audit wrote them (agentops/audit)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from agentops.audit.models import Finding, FindingKind
from agentops.operators.readable import money, when_html

# What each kind means, and what a person does about it.
MEANING: Mapping[str, tuple[str, str]] = {
    FindingKind.NO_STEP: (
        "The provider shows an effect carrying one of our keys, and no step has that key: "
        "something other than a step made it (by hand, or another system reusing a key).",
        "Find who made it; undo it at the provider if it should not stand.",
    ),
    FindingKind.MISSING: (
        "A step is done, and the provider's list of the step's window does not show its "
        "effect: it was removed, never happened as the journal believes, or is elsewhere.",
        "Look the effect up at the provider by the step's key before relying on it.",
    ),
    FindingKind.MISMATCH: (
        "The effect carrying the step's key is not what the step decided: another amount, "
        "currency or recipient, or another kind of effect.",
        "Compare the two sides below; correct the effect at the provider.",
    ),
    FindingKind.OFFSET_UNKNOWN: (
        "The provider shows the effect undone (refunded, released, cancelled) and the journal "
        "knows no undo of it: someone undid it at the provider (its dashboard, support).",
        "Find out who undid it and why; the task relied on the effect standing.",
    ),
    FindingKind.OFFSET_MISSING: (
        "The journal says the effect was undone (its undo step is done), and the provider "
        "shows it standing.",
        "Undo it at the provider, or find why the undo did not take.",
    ),
    FindingKind.NOT_DONE: (
        "The step is recorded as certainly not done, and the provider shows its effect: a "
        "task may have acted again on that belief.",
        "Look for a second effect of the same intent; undo whichever should not stand.",
    ),
    FindingKind.DUPLICATE: (
        "The provider shows more than one effect carrying the step's key: it acted twice.",
        "Undo the second effect at the provider.",
    ),
}

MINOR = re.compile(r"\b(\d+) ([a-z]{3})\b")
KNOWN_CURRENCIES = ("usd", "eur", "gbp", "jpy", "chf", "cad", "aud")


def currencies_of(finding: Finding) -> set[str]:
    """The currencies a finding's sides name (lower case), with the common ones."""
    found = set(KNOWN_CURRENCIES)
    provider, journal = finding.provider_side or {}, finding.journal_side or {}
    for value in (provider.get("currency"), (journal.get("args") or {}).get("currency")):
        if isinstance(value, str) and len(value) == 3:
            found.add(value.lower())
    return found


def readable_text(text: str, currencies: set[str] | None = None) -> str:
    """``refunded 4900 usd`` → ``refunded 49.00 USD``: amounts in minor units with a currency
    code, as the audit's sentences name them, in major units."""
    known = currencies if currencies is not None else set(KNOWN_CURRENCIES)

    def swap(m: re.Match[str]) -> str:
        code = m.group(2)
        return money(int(m.group(1)), code) if code in known else m.group(0)

    return MINOR.sub(swap, text)


def summary(finding: Finding) -> str:
    return readable_text(finding.summary, currencies_of(finding))


@dataclass(frozen=True)
class Compared:
    name: str
    journal: SafeString
    provider: SafeString
    differs: bool


def _text(value: Any) -> SafeString:
    if value in (None, "", [], {}):
        return mark_safe('<span class="small-inline">not said</span>')  # noqa: S308 - constant
    return SafeString(escape(str(value)))


def compared(finding: Finding) -> list[Compared]:
    """The two sides, field by field, those that differ marked."""
    p: Mapping[str, Any] = finding.provider_side or {}
    j: Mapping[str, Any] = finding.journal_side or {}
    args: Mapping[str, Any] = j.get("args") or {}
    evidence: Mapping[str, Any] = j.get("evidence") or {}
    diff: Mapping[str, Any] = finding.differences or {}
    kind = finding.kind
    rows: list[Compared] = []

    def add(name: str, mine: Any, theirs: Any, differs: bool) -> None:
        rows.append(Compared(name, _cell(mine, bool(j)), _cell(theirs, bool(p)), differs))

    add("Effect", j.get("tool"), p.get("tool"), "tool" in diff)
    currency = args.get("currency") or p.get("currency")
    add(
        "Amount",
        money(args.get("amount"), currency) or args.get("amount"),
        money(p.get("amount"), p.get("currency") or currency) or p.get("amount"),
        "amount" in diff or "currency" in diff,
    )
    recipient = diff.get("recipient") or {}
    add("Recipient", recipient.get("journal"), p.get("recipient"), "recipient" in diff)
    ids = [str(v) for v in evidence.values() if isinstance(v, str)]
    add(
        "The provider's id",
        ", ".join(ids),
        p.get("provider_id"),
        kind in (FindingKind.DUPLICATE, FindingKind.NO_STEP, FindingKind.MISSING),
    )
    add(
        "Whether it stands",
        _journal_state(j) if j else None,
        _provider_state(p, finding) if p else None,
        kind
        in (
            FindingKind.OFFSET_UNKNOWN,
            FindingKind.OFFSET_MISSING,
            FindingKind.NOT_DONE,
            FindingKind.MISSING,
            FindingKind.NO_STEP,
        ),
    )
    rows.append(
        Compared(
            "When (settled; made)",
            when_html(j.get("settled_at")) if j.get("settled_at") else _cell(None, bool(j)),
            when_html(p.get("created")) if p.get("created") else _cell(None, bool(p)),
            False,
        )
    )
    add("Key", j.get("step"), p.get("key"), bool(j and p and j.get("step") != p.get("key")))
    return rows


def _cell(value: Any, side_exists: bool) -> SafeString:
    if not side_exists:
        return mark_safe('<span class="small-inline">nothing</span>')  # noqa: S308 - constant
    return _text(value)


def _journal_state(j: Mapping[str, Any]) -> str:
    state = {"done": "done", "not_done": "not done", "unknown": "unknown"}.get(
        str(j.get("state")), str(j.get("state"))
    )
    if j.get("undone"):
        return f"{state}, then undone by its undo step"
    if j.get("undoing"):
        return f"{state}; an undo of it is recorded"
    return f"{state}, standing (no undo)" if state == "done" else state


def _provider_state(p: Mapping[str, Any], finding: Finding) -> str:
    if p.get("offset"):
        undos = [str(u) for u in p.get("undone_by") or () if u]
        by = f" ({', '.join(undos)} found here)" if undos else ""
        return f"happened, then {readable_text(str(p['offset']), currencies_of(finding))}{by}"
    if p.get("lapsed"):
        return "happened, then lapsed on its own"
    return "happened, standing"
