"""Intents: a business effect an agent asks for by name, whose identity the caller cannot break
(docs/design.md §6; docs/mcp.md).

A tool takes whatever arguments a model writes; an intent takes only what *identifies* the
effect — ``charge_invoice(invoice)`` is "the charge for this invoice", and
``send_payment_reminder(invoice, reminder)`` is "this reminder" — and derives the rest (the
amount, the currency, the recipient) from a record agentops reads itself, through a declared
``READ`` tool, never from arguments a model can rephrase. Its identity is the business object
of the effect (``charge:INV-2291``), compared in the journal's normal form
(:func:`journal.keys.object_key`), so a call repeated after a timeout, a reconnect, a cleared
context or with the invoice spelt otherwise lands on the same effect and is told its outcome
instead of acting again. agentops serves the installed apps' intents over MCP
(``manage.py mcp_server``); each one a task starts, of the intent's ``kind``.

Each field exists because without it something goes wrong:

- ``name``, ``description``, ``schema``: what the agent is offered. ``schema`` (a JSON object
  schema) names the identifying arguments only; text is normalised before it is checked
  (NFKC, invisible characters removed, white space trimmed), and an argument that does not fit
  is refused before anything is read or sent.
- ``kind``: the task kind it starts; ``effect``: the tool of that kind whose effect the intent
  is (the renewal's ``charge_customer``), and which must happen once per object.
- ``identity``: the arguments → the effect's business object, exactly as the ``effect`` tool's
  ``guard`` names it (``charge:INV-2291``). Two calls whose identities are one object are one
  intent.
- ``refs``: the arguments and a :class:`Records` → the task's references. Amounts and
  recipients come from the system of record (``records.read("look_up_invoice", {...})``) or
  from what an operator or a program configured, never from the arguments: a model talked
  into another amount cannot move it. Raise :class:`IntentRefused` with a sentence when the
  record says no (an invoice already paid or void): nothing is started.
- ``reads``: the ``READ`` tools ``refs`` may read through (checked at start-up; a read of any
  other tool is refused).
- ``goal``: the arguments → the task's goal, as people read it.
- ``noun`` and ``subject``: how the effect is named to the agent ("charge", "invoice
  INV-2291"), so an unknown outcome reads "no other charge for invoice INV-2291 may start
  meanwhile".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from django.core.checks import CheckMessage, Error

from agentops.effects._registry import registry, tools_made
from journal.protocols import CostClass

__all__ = [
    "Intent",
    "IntentRefused",
    "RecordMissing",
    "RecordUnreadable",
    "Records",
    "intent_checks",
    "intent_get",
    "intents",
    "register_intent",
]


class IntentRefused(ValueError):
    """The system of record says this intent cannot be done (the invoice is paid, void, or has
    no customer address): ``str()`` is the sentence the agent is told; nothing is started."""


class RecordMissing(IntentRefused):
    """The system of record has no such record (no invoice by that number)."""


class RecordUnreadable(Exception):
    """The system of record could not be asked (it did not answer, or answered an error):
    nothing is known, so nothing is started; the agent may ask again."""


class Records(Protocol):
    """What an intent's ``refs`` reads the world through: its declared ``READ`` tools."""

    def read(self, tool: str, args: Mapping[str, Any]) -> dict[str, Any]:
        """The record the ``READ`` tool ``tool`` returns for ``args``. Raises
        :class:`RecordMissing` when there is none, :class:`RecordUnreadable` when the provider
        cannot tell."""
        ...


@dataclass(frozen=True)
class Intent:
    """A business effect an agent may ask for by name (module docstring: each field and the
    failure it prevents)."""

    name: str
    description: str
    schema: dict[str, Any]
    kind: str
    effect: str
    identity: Callable[[Mapping[str, Any]], str]
    refs: Callable[[Mapping[str, Any], Records], Mapping[str, Any]]
    goal: Callable[[Mapping[str, Any]], str]
    noun: str
    subject: Callable[[Mapping[str, Any]], str]
    reads: tuple[str, ...] = ()
    title: str = ""


_intents: dict[str, Intent] = {}


def register_intent(intent: Intent) -> Intent:
    """Declare an intent (served over MCP by ``manage.py mcp_server``)."""
    if intent.name in _intents:
        registry.problems.append(f"intent {intent.name!r} is declared twice")
    _intents[intent.name] = intent
    return intent


def intents() -> dict[str, Intent]:
    return dict(_intents)


def intent_get(name: str) -> Intent:
    """The intent named ``name``; raises ``KeyError`` naming the known ones."""
    try:
        return _intents[name]
    except KeyError:
        known = ", ".join(sorted(_intents)) or "none"
        raise KeyError(f"unknown intent {name!r} (known: {known})") from None


def _error(text: str, hint: str, code: int) -> Error:
    return Error(text, hint=hint, id=f"agentops.E2{code:02d}")


def intent_checks(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Every declared intent, checked at start-up: its kind and effect exist and belong
    together, it reads only ``READ`` tools, and its schema is a JSON object schema."""
    out: list[CheckMessage] = []
    known = tools_made()  # one that cannot be made is said by the declarations' own check
    for intent in _intents.values():
        kind = registry.kinds.get(intent.kind)
        if kind is None:
            out.append(_error(f"intent {intent.name}: kind {intent.kind!r} is not declared", "", 1))
        elif intent.effect not in kind.tools:
            out.append(
                _error(
                    f"intent {intent.name}: kind {intent.kind} does not use {intent.effect!r}",
                    "Name as its effect a tool the kind binds.",
                    2,
                )
            )
        if intent.effect not in known:
            out.append(_error(f"intent {intent.name}: effect {intent.effect!r} is unknown", "", 3))
        for name in intent.reads:
            tool = known.get(name)
            if tool is None or tool.cost != CostClass.READ:
                out.append(
                    _error(
                        f"intent {intent.name}: {name!r} is not a declared READ tool",
                        "An intent reads the system of record only through READ tools.",
                        4,
                    )
                )
        if not isinstance(intent.schema, dict) or intent.schema.get("type") != "object":
            out.append(
                _error(f"intent {intent.name}: its schema is not a JSON object schema", "", 5)
            )
        if not intent.description or not intent.noun:
            out.append(_error(f"intent {intent.name}: say what it does (description, noun)", "", 6))
    return out
