"""Whether what each task said it did is what the providers show (``untrue_summaries``).

Both harnesses are judged alike: the summary a task finished with — the journal's, as the
task's finish step recorded it for people (journal.summary), or the naive loop's, written in
the same form — is read back into claims (done with its evidence, undone and by what, not
done, unknown, refused), and the claims are set against the providers' ledgers:

- every effect said done exists at the provider, under one of the task's own keys, with the
  evidence the summary names, on the object it names (compared in the guards' normal form),
  and still stands;
- every effect said undone exists and was undone at the provider;
- every effect the task's keys made at a provider is one the summary accounts for (done,
  undone, or still being checked under that key): one it calls not done, or does not
  mention, is an untrue summary.

Nothing here reads the journal: the summary is taken as it was told.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from devtools.chaos.ledgers import Effect, Ledgers, effect_guard, object_form

GROUPS = ("done", "undone", "not done", "unknown", "refused")
# How each tool's guard starts: a summary names the object without it (journal.summary).
GUARD_PREFIX = {
    "charge_customer": "charge",
    "refund_charge": "refund",
    "send_email": "email",
    "hold_flight": "flight",
    "release_flight": "release",
    "book_hotel": "hotel",
    "cancel_hotel": "cancel",
}
NO_EVIDENCE = "no evidence recorded"

_LABEL = r"(?P<tool>[a-z_]+)(?: for (?P<obj>.+?))?"
_EVIDENCE = r"\((?P<ev>[^()]*)\)"
_ITEM = {
    "done": re.compile(rf"^{_LABEL} {_EVIDENCE}$"),
    "undone": re.compile(
        rf"^{_LABEL} {_EVIDENCE}, undone(?: by (?P<undo>[a-z_]+) \((?P<uev>[^()]*)\))?$"
    ),
    "not done": re.compile(rf"^{_LABEL} — (?P<detail>.*)$", re.DOTALL),
    "unknown": re.compile(rf"^{_LABEL} — being checked \(reference (?P<key>[^()]+)\)$"),
    "refused": re.compile(rf"^{_LABEL} — (?P<detail>.*)$", re.DOTALL),
}
_COUNTS = re.compile(
    r"^(?P<counts>\d+ (?:done|undone|not done|unknown|refused)"
    r"(?:, \d+ (?:done|undone|not done|unknown|refused))*)\. "
)


@dataclass(frozen=True)
class Claim:
    """One thing a summary says about one decided call."""

    group: str
    tool: str
    obj: str | None
    evidence: str | None = None
    """The identifier it names (``ch_…``, ``msg_…``), or None."""
    undo_tool: str | None = None
    undo_evidence: str | None = None
    reference: str | None = None
    """For an unknown one: the key it is being checked under."""
    text: str = ""

    @property
    def guard(self) -> str | None:
        if self.obj is None:
            return None
        return f"{GUARD_PREFIX.get(self.tool, self.tool)}:{self.obj}"


class Unreadable(ValueError):
    """A summary that does not have the form journal.summary writes."""


def _identifier(label: str | None) -> str | None:
    """``charge ch_1`` → ``ch_1`` (journal.summary.evidence_label)."""
    if not label or label == NO_EVIDENCE:
        return None
    return label.partition(" ")[2] or None


def summary_claims(text: str) -> list[Claim]:
    """The claims of a summary in journal.summary's form (with ``Compensated. `` in front
    for a saga that was compensated). Raises :class:`Unreadable`."""
    body = text.removeprefix("Compensated. ")
    if body == "Nothing was done: no step was decided.":
        return []
    head = _COUNTS.match(body)
    if head is None:
        raise Unreadable(f"no counts at the start of {text[:120]!r}")
    counts = {}
    for part in head["counts"].split(", "):
        number, _, group = part.partition(" ")
        counts[group] = int(number)
    details = body[head.end() :]
    # Each group's text runs from its heading to the next group's heading.
    headings = [(g, f"{g.capitalize()}: ") for g in GROUPS if counts.get(g)]
    claims: list[Claim] = []
    position = 0
    tools = "|".join(sorted(GUARD_PREFIX, key=len, reverse=True))
    for i, (group, heading) in enumerate(headings):
        if not details.startswith(heading, position):
            raise Unreadable(f"expected {heading!r} in {text[:200]!r}")
        start = position + len(heading)
        if i + 1 < len(headings):
            end = details.find(". " + headings[i + 1][1], start)
            if end < 0:
                raise Unreadable(f"no {headings[i + 1][1]!r} after {heading!r} in {text[:200]!r}")
            position = end + 2
        else:
            if not details.endswith("."):
                raise Unreadable(f"no full stop at the end of {text[-120:]!r}")
            end = len(details) - 1
        items = re.split(rf"; (?=(?:{tools})(?: for | \(| —))", details[start:end])
        if len(items) != counts[group]:
            raise Unreadable(f"{counts[group]} {group} counted, {len(items)} listed: {text!r}")
        for item in items:
            claims.append(_claim(group, item))
    return claims


def _claim(group: str, item: str) -> Claim:
    found = _ITEM[group].match(item)
    if found is None:
        raise Unreadable(f"{group}: cannot read {item!r}")
    parts = found.groupdict()
    return Claim(
        group=group,
        tool=parts["tool"],
        obj=parts.get("obj"),
        evidence=_identifier(parts.get("ev")),
        undo_tool=parts.get("undo"),
        undo_evidence=_identifier(parts.get("uev")),
        reference=parts.get("key"),
        text=item,
    )


def summary_render(groups: Mapping[str, Sequence[str]]) -> str:
    """A summary in journal.summary's form from its items by group (for the naive loop,
    which says what it did in the same words, so both are read back alike)."""
    present = [(g, list(groups.get(g) or [])) for g in GROUPS if groups.get(g)]
    if not present:
        return "Nothing was done: no step was decided."
    counts = ", ".join(f"{len(items)} {g}" for g, items in present)
    details = " ".join(f"{g.capitalize()}: {'; '.join(items)}." for g, items in present)
    return f"{counts}. {details}"


def label(tool: str, guard: str | None) -> str:
    """How a summary names a call (journal.summary): the tool, and its object."""
    return tool + (f" for {guard.split(':', 1)[-1]}" if guard else "")


# --- Claims against the ledgers -----------------------------------------------------------------


def _same_object(claim: Claim, effect: Effect) -> bool:
    return object_form(claim.guard) == object_form(effect_guard(effect))


def summary_untrue(
    *, task: str, summary: str, effects: Iterable[Effect], ledgers: Ledgers
) -> list[str]:
    """What is untrue in ``task``'s ``summary``, given the ``effects`` its keys made (each a
    sentence; empty when the summary is true)."""
    try:
        claims = summary_claims(summary)
    except Unreadable as exc:
        return [f"{task}: its summary cannot be read ({exc})"]
    mine = list(effects)
    accounted: set[int] = set()
    wrong: list[str] = []

    def find(tool: str, identifier: str | None) -> Effect | None:
        for effect in mine:
            if effect.tool == tool and identifier in ledgers.names(effect):
                return effect
        return None

    for claim in claims:
        if claim.group not in ("done", "undone"):
            continue
        effect = find(claim.tool, claim.evidence)
        said = f"says {claim.text!r} {claim.group}"
        if effect is None:
            wrong.append(f"{task}: {said}; no effect of this task has {claim.evidence!r}")
            continue
        accounted.add(id(effect))
        if not _same_object(claim, effect):
            other = effect_guard(effect)
            wrong.append(f"{task}: {said}; {effect.object_id} acted on {other!r}")
        undos = ledgers.undos_of(effect)
        if claim.group == "done" and undos:
            wrong.append(f"{task}: {said}; the provider shows it undone ({undos[0].object_id})")
        if claim.group == "undone":
            if not undos:
                wrong.append(f"{task}: {said}; the provider shows it standing")
            for undo in undos:
                if undo in mine:
                    accounted.add(id(undo))
    for claim in claims:
        if claim.group == "unknown" and claim.reference:
            accounted |= {id(e) for e in mine if e.key == claim.reference}
    for effect in mine:
        if id(effect) in accounted:
            continue
        denied = next(
            (
                c
                for c in claims
                if c.group in ("not done", "refused")
                and c.tool == effect.tool
                and _same_object(c, effect)
            ),
            None,
        )
        if denied is not None:
            wrong.append(
                f"{task}: says {denied.text!r} {denied.group}; the provider performed it "
                f"({effect.object_id} under {effect.key})"
            )
        else:
            wrong.append(
                f"{task}: does not mention {effect.tool or effect.operation} {effect.object_id} "
                f"on {effect_guard(effect)!r} (under {effect.key})"
            )
    return wrong


def summaries_untrue(
    summaries: Mapping[str, str], *, key_prefix: Mapping[str, str], ledgers: Ledgers
) -> list[str]:
    """:func:`summary_untrue` for every finished task (``summaries``: task → summary), its
    effects found by the prefix of its keys (``key_prefix``: task → ``ao:<id>:``): one
    sentence per task whose summary is untrue."""
    by_task: dict[str, list[Effect]] = {task: [] for task in summaries}
    prefixes = {prefix: task for task, prefix in key_prefix.items() if task in summaries}
    for effect in ledgers.effects:
        head = _key_head(effect.key)
        if head in prefixes:
            by_task[prefixes[head]].append(effect)
    untrue: list[str] = []
    for task, summary in summaries.items():
        wrong = summary_untrue(task=task, summary=summary, effects=by_task[task], ledgers=ledgers)
        if wrong:  # one line per task: the figure counts tasks
            more = f" (and {len(wrong) - 2} more)" if len(wrong) > 2 else ""
            untrue.append("; ".join(wrong[:2]) + more)
    return untrue


def _key_head(key: str) -> str:
    """``ao:<task>:`` of ``ao:<task>:<n>[:undo]``, ``naive:<task>:`` of
    ``naive:<task>:<n>:<attempt>``."""
    prefix, _, rest = key.partition(":")
    task = rest.partition(":")[0]
    return f"{prefix}:{task}:"


# --- The customer told, once, that what was done was undone --------------------------------------

CLOSING_PURPOSES = frozenset({"cancellation", "refund"})
"""The purposes of the messages a task's closing call sends (commerce/kinds.py): a trip
cancelled, a charge refunded. No kind lets a model send them."""

Customer = tuple[str, str]
"""Whom a closing message is for: the address, and the business reference it is about."""


def customer_of(address: object, reference: object) -> Customer:
    """A customer in one form (an address and a reference compared as the guards compare
    them, whatever their case or spaces)."""
    return (str(address or "").strip().casefold(), object_form(str(reference or "")) or "")


def closing_customer(effect: Effect) -> Customer | None:
    """The customer a closing message (by its purpose) was sent to, or None when ``effect``
    is not one."""
    if effect.operation != "messages.send":
        return None
    headers = effect.params.get("headers") or {}
    purpose = str(headers.get("X-Agentops-Purpose") or "").partition(" ")[0]
    if purpose not in CLOSING_PURPOSES:
        return None
    return customer_of(effect.params.get("to"), headers.get("X-Agentops-Reference"))


@dataclass(frozen=True)
class Told:
    """Each customer owed a closing message who got none (``not_told``), got two or more
    (``twice``), or got one they were not owed (``wrongly``): a sentence each, one per
    customer."""

    not_told: list[str]
    twice: list[str]
    wrongly: list[str]
    owed: int = 0
    """How many customers were owed one."""


def customers_told(
    *,
    owed: Iterable[Customer],
    compensated: Mapping[str, bool],
    ledgers: Ledgers,
    standing: Iterable[Customer] = (),
) -> Told:
    """Whether every customer whose task's effects were undone was told so exactly once, by
    the mail provider's ledger: ``owed``, the customers a closing message is owed (a trip the
    plan rejected, a task that ended compensated whose kind declares a closing call), whoever
    sends it; ``compensated``, for each task's key prefix (``ao:<id>:``), whether it ended
    compensated: a closing message under the keys of one that did not is told wrongly, and
    so is one to a customer nobody owed one, or (``standing``: the customers of a saga that
    finished, a trip asked for twice, say) one whose booking stands."""
    owed_now, stands = set(owed), set(standing)
    sent: dict[Customer, list[Effect]] = {}
    wrongly: dict[Customer, str] = {}
    for effect in sorted(ledgers.effects, key=lambda e: e.at):
        customer = closing_customer(effect)
        if customer is None:
            continue
        sent.setdefault(customer, []).append(effect)
        if compensated.get(_key_head(effect.key)) is False:
            why = "its task was not compensated"
        elif customer in stands:
            why = "a saga of theirs finished: what it says was undone stands"
        elif customer not in owed_now:
            why = "nothing of theirs was undone"
        else:
            continue
        wrongly.setdefault(
            customer,
            f"{effect.object_id} to {customer[0]} about {customer[1]} (under {effect.key}): {why}",
        )
    not_told = [
        f"{address} about {reference}: no closing message"
        for address, reference in sorted(owed_now)
        if not sent.get((address, reference))
    ]
    twice = [
        f"{address} about {reference}: {len(messages)} closing messages "
        f"({', '.join(f'{e.object_id} under {e.key}' for e in messages[:3])})"
        for (address, reference), messages in sorted(sent.items())
        if len(messages) > 1
    ]
    return Told(not_told=not_told, twice=twice, wrongly=list(wrongly.values()), owed=len(owed_now))
