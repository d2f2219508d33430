"""What the providers really did: their ledgers, read once the world stopped moving.

The ledgers are the chaos run's ground truth: every effect a provider performed, with the
request's key and parameters. From them alone this module tells which business object each
effect acted on — named by the tool's own guard (``charge:INV-2291``) and compared in the
product's normal form (:func:`journal.keys.object_key`), exactly as the guards compare them —
and which business effects happened twice, and why (:func:`business_duplicates`).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from agentops.kinds import tool_registry
from journal.keys import UnsafeName, object_key

# Which provider operation performs each tool's effect.
EFFECTS = {
    "charge_customer": ("payments", "payment_intents.create"),
    "refund_charge": ("payments", "refunds.create"),
    "send_email": ("mail", "messages.send"),
    "hold_flight": ("bookings", "flight_holds.create"),
    "release_flight": ("bookings", "flight_holds.release"),
    "book_hotel": ("bookings", "hotel_bookings.create"),
    "cancel_hotel": ("bookings", "hotel_bookings.cancel"),
}
PROVIDER_OF = {tool: provider for tool, (provider, _) in EFFECTS.items()}
TOOL_OF = {operation: tool for tool, (_, operation) in EFFECTS.items()}
# The operation that undoes an effect, and how an undo names what it undoes.
UNDO_OF = {
    "payment_intents.create": "refunds.create",
    "flight_holds.create": "flight_holds.release",
    "hotel_bookings.create": "hotel_bookings.cancel",
}
# Once-only business effects (journal guards with ``once``): a second while a first stands
# is a business duplicate.
ONCE_PURPOSES = ("receipt", "itinerary", "reminder", "cancellation")

# Why a business effect happened twice (the same categories for both harnesses).
FROM_FAULTS = "from_faults"
"""Both by one task: a retry after a fault, or its model calling again after an error."""
ASKED_TWICE = "asked_twice"
"""By two tasks the plan asked for the same thing on purpose (a retried cron, a double click)."""
WRONG_OBJECT = "wrong_object"
"""By two tasks that were not asked for the same thing: one acted on another's object (its
model named a neighbouring invoice or traveller)."""
CAUSES = (FROM_FAULTS, ASKED_TWICE, WRONG_OBJECT)


@dataclass(frozen=True)
class Effect:
    """One effect a provider performed, from its ledger."""

    operation: str
    key: str
    object_id: str
    at: float
    params: Mapping[str, Any]
    extra: Mapping[str, Any]

    @property
    def tool(self) -> str:
        return TOOL_OF.get(self.operation, "")


@dataclass
class Ledgers:
    """The three providers' ledgers and fault logs, read once the world stopped moving.
    ``charges``: each charge's payment (``ch_…`` → ``pi_…``), read from the payments
    provider, since a task names a payment by its charge."""

    entries: dict[str, list[dict[str, Any]]]
    fault_logs: dict[str, list[dict[str, Any]]]
    charges: dict[str, str] = field(default_factory=dict)
    effects: list[Effect] = field(default_factory=list)

    def __post_init__(self) -> None:
        for rows in self.entries.values():
            for row in rows:
                declined = row["operation"] == "payment_intents.create" and (
                    row.get("status") != "succeeded"
                )
                if declined:
                    continue  # a declined card: a request, not an effect
                self.effects.append(
                    Effect(
                        operation=row["operation"],
                        key=row.get("key") or "",
                        object_id=row.get("object_id") or "",
                        at=float(row["at"]),
                        params=row.get("params") or {},
                        extra=row,
                    )
                )
        self._undos: dict[tuple[str, str], list[Effect]] = defaultdict(list)
        for effect in self.effects:
            if effect.operation == "refunds.create":
                target = str(effect.extra.get("payment_intent") or "")
            else:
                target = effect.object_id
            self._undos[(effect.operation, target)].append(effect)
        self._charges_of: dict[str, set[str]] = defaultdict(set)
        for charge, payment in self.charges.items():
            self._charges_of[payment].add(charge)

    def by_key(self) -> dict[tuple[str, str], list[Effect]]:
        found: dict[tuple[str, str], list[Effect]] = defaultdict(list)
        for effect in self.effects:
            found[(effect.operation, effect.key)].append(effect)
        return found

    def undone(self, operation: str, object_id: str) -> list[Effect]:
        """The refunds of a payment, the releases of a hold, the cancellations of a booking."""
        return list(self._undos.get((operation, object_id), []))

    def undos_of(self, effect: Effect) -> list[Effect]:
        """What undid ``effect`` at the provider (nothing, for an effect nothing undoes)."""
        undo = UNDO_OF.get(effect.operation)
        return self.undone(undo, effect.object_id) if undo else []

    def names(self, effect: Effect) -> set[str]:
        """The identifiers ``effect`` is known by: its object's id, and a payment's charge."""
        found = {effect.object_id}
        if effect.operation == "payment_intents.create":
            found |= self._charges_of.get(effect.object_id, set())
        return found - {""}

    def faults(self) -> Iterable[tuple[str, dict[str, Any]]]:
        for provider, rows in self.fault_logs.items():
            for row in rows:
                yield provider, row


# --- Business objects: named as the guards name them ------------------------------------------


@cache
def _tools() -> dict[str, Any]:
    return dict(tool_registry())


def _args(effect: Effect) -> dict[str, Any] | None:
    """The tool's arguments, as far as the provider's record of the request tells them."""
    p = effect.params
    if effect.operation == "payment_intents.create":
        return {"invoice": (p.get("metadata") or {}).get("invoice")}
    if effect.operation == "messages.send":
        headers = p.get("headers") or {}
        purpose, _, number = str(headers.get("X-Agentops-Purpose") or "").partition(" ")
        args: dict[str, Any] = {
            "purpose": purpose,
            "reference": headers.get("X-Agentops-Reference"),
        }
        if purpose == "reminder":
            args["reminder"] = number
        return args
    if effect.operation == "flight_holds.create":
        return {"flight": p.get("flight"), "passenger": p.get("passenger")}
    if effect.operation == "hotel_bookings.create":
        return {k: p.get(k) for k in ("hotel", "guest", "check_in")}
    return None


def effect_guard(effect: Effect) -> str | None:
    """The business object ``effect`` acted on, as its tool's guard names it
    (``email:reminder:2:INV-7``); None for an undo."""
    args = _args(effect)
    tool = _tools().get(effect.tool)
    if args is None or tool is None or any(v in (None, "") for v in args.values()):
        return None
    guard: str | None = tool.guard(args)
    return guard


def object_form(guard: str | None) -> str | None:
    """A guard's name in the one normal form the guards compare (``journal.keys``)."""
    if not guard:
        return None
    try:
        return object_key(guard)
    except UnsafeName:
        return f"unsafe name {guard!r}"


def business_object(effect: Effect) -> str | None:
    """The once-only business object ``effect`` acted on, in normal form, or None: a charge
    of an invoice, a receipt, itinerary or reminder N of a reference, a hold of a flight for
    a passenger, a room at a hotel for a guest from a date."""
    guard = effect_guard(effect)
    if guard is None:
        return None
    if effect.operation == "messages.send" and guard.split(":")[1] not in ONCE_PURPOSES:
        return None  # a notice, a payment-failed message: may be sent again
    return object_form(guard)


# --- Business duplicates, from the ledgers alone ------------------------------------------------


@dataclass(frozen=True)
class Duplicate:
    """A second business effect while a first one stood, and why it happened."""

    name: str
    first: Effect
    second: Effect
    cause: str

    def __str__(self) -> str:
        said = effect_guard(self.second) or self.name
        return (
            f"a second {said} ({self.second.object_id}; first {self.first.object_id}): "
            f"{self.cause.replace('_', ' ')}"
        )


def business_duplicates(
    ledgers: Ledgers, *, owner: Callable[[str], int | None], asked_twice: Callable[[int, int], bool]
) -> list[Duplicate]:
    """Each second business effect while a first one stood, with its cause: ``owner`` tells
    which task of the plan (its ``n``) an effect's key belongs to, ``asked_twice`` whether
    the plan asked two tasks for the same thing."""
    found: list[Duplicate] = []
    standing: dict[str, list[tuple[Effect, float]]] = defaultdict(list)
    for effect in sorted(ledgers.effects, key=lambda e: e.at):
        name = business_object(effect)
        if name is None:
            continue
        ended = min((u.at for u in ledgers.undos_of(effect)), default=float("inf"))
        already = [e for e, until in standing[name] if until > effect.at]
        if already:
            first = already[0]
            a, b = owner(first.key), owner(effect.key)
            if a is not None and a == b:
                cause = FROM_FAULTS
            elif a is not None and b is not None and asked_twice(a, b):
                cause = ASKED_TWICE
            else:
                cause = WRONG_OBJECT
            found.append(Duplicate(name, first, effect, cause))
        standing[name].append((effect, ended))
    return found


def by_cause(duplicates: Iterable[Duplicate]) -> dict[str, int]:
    counted = Counter(d.cause for d in duplicates)
    return {cause: counted.get(cause, 0) for cause in CAUSES}


def faults_counted(ledgers: Ledgers, process: Mapping[str, int]) -> dict[str, int]:
    """Every fault the world applied, by kind: the providers' log, and the process faults."""
    counted: Counter[str] = Counter(process)
    for _provider, row in ledgers.faults():
        counted["provider_down" if row["fault"] == "down" else row["fault"]] += 1
    return dict(sorted(counted.items()))
