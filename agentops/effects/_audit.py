"""The provider audit's contract: how an app lists its provider's effects, so agentops can
match them, by key, against the journal (docs/operating/audit.md).

A payments team reconciles its records against the provider's every day. agentops does the
same for every provider an app declares an :class:`Audit` for: it lists the effects that
carry agentops' keys in a window and compares them with the steps that made them. The app
says only how to list (and, optionally, what each step expects and how to notice the
provider restarted); agentops matches, stores each finding once and puts it in front of a
person.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, ClassVar

from agentops.effects._registry import registry


@dataclass(frozen=True)
class ProviderEffect:
    """One effect as its provider lists it.

    - ``provider_id``: the provider's own id for it (``pi_…``, ``msg_…``, ``fh_…``).
    - ``key``: the step key it carries (Stripe's ``metadata[agentops_key]``, the key inside a
      ``Message-ID``, a booking's reference): how it is matched to its step.
    - ``tool``: the tool whose effect it is (``charge_customer``): a step of another tool with
      this key is a mismatch.
    - ``amount`` (minor units), ``currency``, ``recipient`` (a customer, an address, a guest):
      what it was, compared with what the step expected (:meth:`Audit.expected`) where both
      sides say; ``None`` where the provider does not.
    - ``offset``: how it was undone at the provider (``refunded 4900 usd``, ``released``,
      ``cancelled``), or ``""`` while it stands.
    - ``undone_by``: the provider's ids of what undid it, when it can say (each refund of a
      payment, partial or whole): each is a finding of its own, so a second refund of one
      payment is put in front of a person, and whoever a kind tells of it is told once per
      refund (``Kind.on_undone_elsewhere``). Empty: the effect is one finding, by its own id.
    - ``lapsed``: it stopped standing on its own (a hold that expired): neither an undo the
      journal should know of, nor one it is missing.
    - ``raw``: what a person needs to see of the provider's object — never its secrets (a
      PaymentIntent's ``client_secret``): it is stored with the finding.

    List only effects that happened (a succeeded payment, a sent message, a hold made), never
    a declined payment or a refund still pending: the audit reads "listed" as "it happened".
    """

    provider_id: str
    key: str
    tool: str
    amount: int | None = None
    currency: str | None = None
    recipient: str | None = None
    offset: str = ""
    undone_by: tuple[str, ...] = ()
    lapsed: bool = False
    created: datetime | None = None
    raw: Mapping[str, Any] = field(default_factory=dict)


class Audit:
    """How one provider's effects are listed for the audit. Subclass it, set ``provider``
    and ``tools``, implement :meth:`effects`, and register the class with
    :func:`register_audit` (it is made fresh for every audit, so settings changed since
    count).

    - ``provider``: its name (``stripe``): findings are filed under it.
    - ``tools``: the tools whose effects it lists by their keys. A ``done`` step of one of
      them, made in the window, that the provider does not list is a finding ("the provider
      does not show it"). An undo that acts on an object by its id (a release) carries no key:
      leave it out, and say on the object it undid that it was undone (``offset``).
    - ``list_lag``: how long after an effect its list may still miss it. Steps settled more
      recently than this before the window's end are not judged missing yet.
    - :meth:`effects`: every effect carrying one of our keys created in ``[since, until]``,
      and every one undone in that window (a refund made today of last week's payment), each
      once. Raise when the provider cannot be asked or the list is incomplete: an audit that
      cannot list finds nothing missing rather than everything.
    - :meth:`expected`: what a step's frozen arguments (and evidence) say its effect is.
      By default, the amount and currency its tool declares as money.
    - :meth:`boot`: who answers now, as ``(address, run)``, if the provider can say (the
      sandboxes do, at ``/_sandbox/health``). A new run at the same address is a restart,
      and an audit follows at once; ``None``: it cannot tell.
    """

    provider: ClassVar[str]
    tools: ClassVar[tuple[str, ...]] = ()
    list_lag: ClassVar[timedelta] = timedelta(0)

    def effects(self, since: datetime, until: datetime) -> Iterable[ProviderEffect]:
        raise NotImplementedError(f"the {self.provider} audit does not say how it lists")

    def expected(
        self, tool: str, args: Mapping[str, Any], evidence: Mapping[str, Any]
    ) -> dict[str, Any]:
        factory = registry.tools.get(tool)
        money = factory().money if factory is not None else None
        if money is None:
            return {}
        return {"amount": args.get(money.amount), "currency": args.get(money.currency)}

    def boot(self) -> tuple[str, str] | None:
        return None


_audits: dict[str, Callable[[], Audit]] = {}


def register_audit(factory: Callable[[], Audit]) -> Callable[[], Audit]:
    """Declare how a provider's effects are listed for the audit. Usable as a class
    decorator."""
    name = getattr(factory, "provider", None) or factory().provider
    if name in _audits:
        registry.problems.append(f"audit of provider {name!r} is declared twice")
    _audits[name] = factory
    return factory


def audits() -> dict[str, Audit]:
    """Every declared audit, made fresh."""
    return {name: factory() for name, factory in _audits.items()}
