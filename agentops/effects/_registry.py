"""What the installed apps declare: their tools, kinds, playbooks, sandbox providers, pages,
task actions and demo tasks — found the Django way (each app's ``effects`` module, like
``admin``).

A Django app gives agentops its own tools and kinds by having an ``effects.py`` that calls
the ``register_*`` functions (``agentops.effects``). ``agentops``' app config imports every
installed app's ``effects`` module when Django starts (``autodiscover``); nothing in the
core names an app's tools, kinds or providers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.utils.module_loading import autodiscover_modules

from agentops.effects._kind import Kind
from agentops.effects._tool import Tool, tool_setting_declare
from journal.protocols import Decision, TaskFacts

Playbook = Callable[[TaskFacts], Decision]


@dataclass(frozen=True)
class Sandbox:
    """A stand-in provider an app brings, which ``make run`` starts unless the user points
    the app at the real one.

    ``module`` is run as ``python -m <module> --port <port> <args>``, on ``port`` (or the
    port in the environment variable ``port_setting``); ``unless`` is the setting whose
    presence means the real provider is configured, and then nothing is started.
    ``settings`` are what the app is given to reach it, ``defaults`` what it is given only
    if the user did not say. In ``args``, ``settings`` and ``defaults``, ``{url}`` is the
    sandbox's address, ``{web}`` the app's, and ``{secret}`` a secret made for the run,
    also given to the sandbox as ``SANDBOX_WEBHOOK_SECRET`` (to sign what it posts back)."""

    name: str
    module: str
    port: int
    unless: str
    settings: Mapping[str, str] = field(default_factory=dict)
    defaults: Mapping[str, str] = field(default_factory=dict)
    args: tuple[str, ...] = ()
    port_setting: str = ""


class ActionRefused(Exception):
    """A task action that is not done now: ``str()`` is the sentence the person is shown."""


@dataclass(frozen=True)
class TaskAction:
    """A button on a task's page that an app adds (its own permission, a question to confirm,
    a reason asked for): ``available(task)`` says whether to offer it; ``perform(task=,
    actor=, reason=)`` does it, through the app's own service, and returns the task to show
    next (or ``None`` for this one), or raises :class:`ActionRefused` with a sentence."""

    name: str
    label: str
    permission: str
    question: str
    available: Callable[[Any], bool]
    perform: Callable[..., Any]


@dataclass(frozen=True)
class TaskLink:
    """A link a task's page shows (a customer's page for its payment)."""

    label: str
    url: Callable[[Any], str | None]


@dataclass(frozen=True)
class DemoTask:
    """A task an app starts for the demo ``make run`` shows (``manage.py demo_seed``), once.

    Its goal is shown prefixed with ``Demo:``. With ``shows``, the summary ``make run`` ends
    with links to the task's pages (each :class:`TaskLink` of the installed apps that gives
    it one), named ``name`` and saying what they show once a worker has run it (``"paid"``);
    in the order the tasks were declared."""

    kind: str
    goal: str
    refs: Mapping[str, Any]
    name: str = ""
    shows: str = ""


@dataclass
class Registry:
    tools: dict[str, Callable[[], Tool]] = field(default_factory=dict)
    kinds: dict[str, Kind] = field(default_factory=dict)
    playbooks: dict[str, Playbook] = field(default_factory=dict)
    sandboxes: dict[str, Sandbox] = field(default_factory=dict)
    urls: list[tuple[str, str]] = field(default_factory=list)
    actions: dict[str, TaskAction] = field(default_factory=dict)
    links: list[TaskLink] = field(default_factory=list)
    demos: list[DemoTask] = field(default_factory=list)
    event_appliers: dict[str, Callable[[str], str]] = field(default_factory=dict)
    """How each provider's stored notifications are verified and applied, by a worker."""
    problems: list[str] = field(default_factory=list)
    """Declarations refused as they were made (a name twice): the start-up checks say so."""


registry = Registry()


def _once(table: Mapping[str, Any], name: str, what: str) -> None:
    if name in table:
        registry.problems.append(f"{what} {name!r} is declared twice")


def register_tool(factory: Callable[[], Tool]) -> Callable[[], Tool]:
    """Declare a tool (its class, or any callable that makes one: it is made fresh for every
    run, so settings changed since count). Usable as a class decorator."""
    name = getattr(factory, "name", None) or factory().name
    _once(registry.tools, name, "tool")
    registry.tools[name] = factory
    return factory


def register_kind(kind: Kind) -> Kind:
    _once(registry.kinds, kind.name, "kind")
    registry.kinds[kind.name] = kind
    return kind


def register_playbook(kind: str) -> Callable[[Playbook], Playbook]:
    """Declare how the scripted planner (``PLANNER=scripted``: demos and tests) decides for a
    kind. A decorator."""

    def declare(playbook: Playbook) -> Playbook:
        _once(registry.playbooks, kind, "playbook for kind")
        registry.playbooks[kind] = playbook
        return playbook

    return declare


def register_sandbox(sandbox: Sandbox) -> Sandbox:
    _once(registry.sandboxes, sandbox.name, "sandbox")
    registry.sandboxes[sandbox.name] = sandbox
    return sandbox


def register_urls(prefix: str, urlconf: str) -> None:
    """Pages an app serves (a customer's page, a provider's webhook), under ``prefix``."""
    registry.urls.append((prefix, urlconf))


def register_event_applier(provider: str) -> Callable[[Callable[[str], str]], Callable[[str], str]]:
    """Declare how a worker applies ``provider``'s notifications, as the web server stored them
    (``store_provider_event``): the function takes the stored event's id, verifies it with the
    provider's secret, settles what it reports (``step_settle``...) and returns what it did, in
    a sentence. A decorator. The web server's database role may store an event but settle
    nothing: only a worker's may (docs/design.md §4, "A role for each kind of process")."""

    def declare(apply: Callable[[str], str]) -> Callable[[str], str]:
        _once(registry.event_appliers, provider, "event applier")
        registry.event_appliers[provider] = apply
        return apply

    return declare


def register_action(action: TaskAction) -> TaskAction:
    _once(registry.actions, action.name, "task action")
    registry.actions[action.name] = action
    return action


def register_link(link: TaskLink) -> TaskLink:
    registry.links.append(link)
    return link


def register_demo(*tasks: DemoTask) -> None:
    """Tasks for the demo ``make run`` starts (``manage.py demo_seed``)."""
    registry.demos.extend(tasks)


def autodiscover() -> None:
    """Import every installed app's ``effects`` module (called once, when Django starts),
    and declare the settings their tools read (the settings page lists them)."""
    autodiscover_modules("effects")
    tool_settings_declare()


def tool_settings_declare() -> None:
    """Declare each setting the declared tools name (``base_setting``, ``api_key_setting``,
    ``key_lifetime_setting``, ``lookup_lag_setting``) that the settings module does not: an
    app's tool configured from the environment alone is on the settings page too."""
    users: dict[tuple[str, str], list[str]] = {}
    for name, factory in registry.tools.items():
        for attribute in _TOOL_SETTINGS:
            setting = getattr(factory, attribute, "")
            if setting:
                users.setdefault((attribute, setting), []).append(name)
    for (attribute, setting), tools in users.items():
        named = ", ".join(f"`{tool}`" for tool in tools)
        meaning, kind, shown = _TOOL_SETTINGS[attribute]
        if attribute == "base_setting":
            bases = {getattr(registry.tools[tool], "default_base", "") for tool in tools}
            if bases - {""}:
                shown = "empty (= " + ", ".join(f"`{b}`" for b in sorted(bases - {""})) + ")"
        tool_setting_declare(
            setting,
            meaning.format(tools=named, s="s" if len(tools) == 1 else ""),
            kind=kind,
            shown=shown,
        )


_TOOL_SETTINGS = {
    "base_setting": (
        "The address of the provider that {tools} call{s}.",
        "url",
        "empty (its calls are refused: agentops.W117)",
    ),
    "api_key_setting": ("The key that {tools} send{s} to its provider.", "secret", "empty"),
    "key_lifetime_setting": (
        "How long the provider of {tools} remembers idempotency keys, in seconds; retries "
        "happen only within 90% of it.",
        "seconds",
        "none: required (agentops.E118)",
    ),
    "lookup_lag_setting": (
        "How long after a call of {tools} the provider's lookup may still miss it, in seconds.",
        "seconds",
        "none: required (agentops.E118)",
    ),
}
"""A tool's setting attributes: what each means, its kind and its default as shown."""


# --- What the core reads ---------------------------------------------------------------------


class UnknownKind(ValueError):
    pass


def tools() -> dict[str, Tool]:
    """Every declared tool, made fresh (so settings changed since, e.g. in tests, count)."""
    made = {}
    for name, factory in registry.tools.items():
        tool = factory()
        made[name] = tool
    return made


def tools_made() -> dict[str, Tool]:
    """Every declared tool that can be made now, for the start-up checks: one that cannot
    (a setting missing, a bug) is left out, and the declarations' own check says why
    (agentops.E116, agentops.E118), once."""
    made = {}
    for name, factory in registry.tools.items():
        try:
            made[name] = factory()
        except Exception:  # noqa: S112 - said by the declarations' check
            continue
    return made


def kinds() -> dict[str, Kind]:
    return dict(registry.kinds)


def kind_get(name: str) -> Kind:
    try:
        return registry.kinds[name]
    except KeyError:
        known = ", ".join(sorted(registry.kinds)) or "none"
        raise UnknownKind(f"unknown task kind {name!r} (known: {known})") from None
