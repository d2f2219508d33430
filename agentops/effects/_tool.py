"""The tool contract: what a tool declares, each field named by the failure it prevents."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, ClassVar

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from agentops import conf, shared_settings
from agentops.effects._schema import schema_problems
from journal.outcomes import Observation, Outcome
from journal.protocols import CostClass

_UNSET: Any = object()


class SettingMissing(ImproperlyConfigured):
    """A tool's setting is set nowhere, or is not what it must be: ``manage.py check`` names
    it (agentops.E118), and a run of a task that needs the tool is handed to a person."""

    def __init__(self, name: str, problem: str = "is not set") -> None:
        super().__init__(
            f"the setting {name} {problem}: set it in your Django settings or as an "
            "environment variable of that name"
        )
        self.setting = name


def tool_setting(name: str, default: Any = _UNSET) -> Any:
    """A setting a tool declares (its provider's address, its key, how long its provider
    keeps keys): Django's setting of that name if there is one, else the environment
    variable of that name, else ``default``; with no default, :class:`SettingMissing`. So an
    app's tool is configured without a settings module of its own
    (docs/your-own/tools-and-kinds.md, "Your own app")."""
    value = getattr(settings, name, _UNSET)
    if value is _UNSET:
        if name not in conf.declared:  # a call's path: made once, not at every call
            tool_setting_declare(name, "A setting a tool reads (`agentops.effects.tool_setting`).")
        found = conf.raw(name)
        value = _UNSET if found is None else found
    if value is _UNSET:
        if default is _UNSET:
            raise SettingMissing(name)
        return default
    return value


def tool_setting_declare(
    name: str, meaning: str, *, kind: str = "text", shown: str = "empty"
) -> conf.Setting:
    """Declare a tool's setting for the settings page (agentops/conf.py), unless the settings
    module declares it already with its meaning and default. Every installed tool's are
    declared when the apps' tools are loaded (agentops.effects.autodiscover)."""
    return conf.declare_unless_known(
        conf.Setting(
            name=name,
            kind=kind,
            default="",
            meaning=meaning,
            shown=shown,
            group=shared_settings.TOOLS.title,
        )
    )


def seconds_setting(name: str, *, zero: bool = False) -> float:
    """A tool's setting that is a number of seconds (:func:`tool_setting`): above zero, or
    zero or more when ``zero`` (a lag may be none; a key's lifetime may not)."""
    value = tool_setting(name)
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise SettingMissing(name, f"is {value!r}, not a number of seconds") from None
    if not (seconds >= 0 if zero else seconds > 0):
        bound = "zero or more" if zero else "above zero"
        raise SettingMissing(name, f"is {value!r}: a number of seconds {bound}") from None
    return seconds


@dataclass(frozen=True)
class Money:
    """Which of a tool's arguments are an amount (integer minor units) and its currency. A
    kind caps the money its tasks may move, per currency, over every tool that declares it:
    without this, a refund or a gift card could move any amount the model names."""

    amount: str = "amount"
    currency: str = "currency"


class Tool:
    """A tool with effects in the world, as agentops runs it (docs/design.md §2–§9).

    Subclass it and set the class attributes; override :meth:`call` and :meth:`lookup` (or
    use :class:`HttpTool`, which has them for the common HTTP JSON provider). Each
    attribute exists because, without it, something goes wrong:

    - ``name``, ``description``, ``schema`` (JSON Schema of the arguments): what the model
      is offered. Arguments that do not fit are refused before anything is sent, so
      ``"49.00"`` for an integer amount never reaches a provider.
    - ``cost``: how much a duplicate costs. ``READ`` (no effect: retried a few times,
      never looked up), ``CHEAP`` (an effect a duplicate of which is harmless enough — a
      status ping: keyed and retried while the key lives, never looked up) or ``FULL``
      (payments, messages, bookings: keyed, looked up, reconciled, guarded).
    - ``key_lifetime`` (or ``key_lifetime_setting``, a setting in seconds): how long the
      provider remembers an idempotency key. A retry after that is a new request — a second
      charge — so the harness only retries within 90 % of it, and looks up after.
    - ``lookup_lag`` (or ``lookup_lag_setting``): how long after a call the provider's lookup
      may still miss it (Stripe search: about a minute). Without it, "not found" right
      after a timeout would be taken for "never happened".
    - ``evidence``: the fields of the provider's answer that prove the effect (a charge
      id, a message id, a booking id). A 200 without them — an empty body, a proxy's HTML
      page — is ``unknown`` and looked up, never ``done`` with nothing to show.
    - ``compensation`` (the tool that undoes it) and :meth:`undo_args` (its evidence → the
      undo's arguments, decided by code, never a model), or ``irreversible``: a saga
      cannot place a step that nobody can undo, and sends what cannot be undone last.
    - :meth:`guard` and :meth:`once`: the business object it acts on (``charge:INV-2291``)
      and whether its effect happens once per object — across tasks, retries and
      rephrasings, the invoice is paid once.
    - ``money``: its amount and currency arguments, capped per task by its kind.
    - ``also_searchable``: more evidence fields people look an effect up by.
    - :meth:`standing`: whether an effect can lapse at the provider on its own (a flight
      hold expires); a saga asks before charging for what it holds.
    """

    name: ClassVar[str]
    description: ClassVar[str]
    schema: ClassVar[dict[str, Any]]
    cost: CostClass = CostClass.FULL
    evidence: tuple[str, ...] = ()
    compensation: str | None = None
    irreversible: bool = False
    money: Money | None = None
    also_searchable: tuple[str, ...] = ()
    key_lifetime: timedelta = timedelta(hours=24)
    lookup_lag: timedelta = timedelta(0)
    key_lifetime_setting: ClassVar[str] = ""
    lookup_lag_setting: ClassVar[str] = ""

    def __init__(self) -> None:
        # Read when the tool is made (fresh for each run), so a setting changed since counts.
        if self.key_lifetime_setting:
            self.key_lifetime = timedelta(seconds=seconds_setting(self.key_lifetime_setting))
        if self.lookup_lag_setting:
            self.lookup_lag = timedelta(seconds=seconds_setting(self.lookup_lag_setting, zero=True))

    @property
    def timeout(self) -> float:
        """Seconds a call waits for its provider; after that its outcome is unknown."""
        return float(settings.TOOL_TIMEOUTS.get(self.name, settings.TOOL_TIMEOUT_SECONDS))

    @property
    def requests_per_call(self) -> int:
        """How many requests one call or one lookup may make in a row, each up to
        ``timeout``: what the runner's lease must outlast (a start-up check)."""
        return 1

    @property
    def searchable(self) -> tuple[str, ...]:
        """The evidence people find an effect by (its ids): ``evidence`` and
        ``also_searchable`` (a receipt's charge id)."""
        return (*self.evidence, *self.also_searchable)

    @property
    def looks_up(self) -> bool:
        """Whether :meth:`lookup` is implemented: a ``FULL`` tool must be able to ask the
        provider what became of a call it did not hear back from."""
        return type(self).lookup is not Tool.lookup

    def validate(self, args: Mapping[str, Any]) -> list[str]:
        return schema_problems(self.schema, dict(args))

    def guard(self, args: Mapping[str, Any]) -> str | None:
        return None

    def once(self, args: Mapping[str, Any]) -> bool:
        return False

    def undo_args(self, args: Mapping[str, Any], evidence: Mapping[str, Any]) -> dict[str, Any]:
        raise NotImplementedError(f"{self.name} has no compensation")

    def standing(self, args: Mapping[str, Any], evidence: Mapping[str, Any]) -> bool | None:
        return None  # most effects cannot lapse by themselves

    def call(self, args: Mapping[str, Any], *, key: str) -> Observation:
        raise NotImplementedError(f"{self.name} does not say how it is called")

    def lookup(self, args: Mapping[str, Any], *, key: str) -> Outcome | None:
        raise NotImplementedError(f"{self.name} cannot look its effects up")
