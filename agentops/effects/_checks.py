"""Start-up checks of what the installed apps declare (``manage.py check``): a misdeclared
tool or kind is refused with a sentence before any task runs into it."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning

from agentops.effects._registry import registry
from agentops.effects._tool import SettingMissing, Tool, tool_setting
from journal.policy import DEFAULT_POLICY
from journal.protocols import CostClass


def _error(text: str, hint: str, code: int) -> Error:
    return Error(text, hint=hint, id=f"agentops.E1{code:02d}")


def _span(seconds: float) -> str:
    """``22.5 s``; ``21:36:00`` or ``1 day, 0:00:00`` from ten minutes on."""
    if seconds < 600:
        return f"{round(seconds, 3):g} s"
    return str(timedelta(seconds=round(seconds)))


def key_problems(tool: Tool, name: str) -> list[CheckMessage]:
    """Whether the provider keeps a keyed tool's keys for as long as a request with one may
    still be sent (docs/design.md §15).

    A retry with the step's key (``journal.reconcile``: a round whose lookup found nothing)
    may begin at any moment until the journal stops trusting the key — 90 % of its lifetime
    after the step was recorded — however the reconciliation schedule runs, since rounds run
    late under load or after an outage; and that retry may go on sending requests, the
    library's own retries included, for one whole call (``timeout`` × ``requests_per_call``).
    The key must outlive both, or the provider takes the last request for a new one: an error.
    Transient retries (``TRANSIENT_RETRY_SCHEDULE``) are new steps with new keys, and do not
    count here.

    Short of that, the schedule says whether the rounds can use the key at all: if even its
    last round, on time, would retry after the journal stops trusting the key, a step still
    unknown then is only looked up, then given to a person (a warning: safe, but slower)."""
    out: list[CheckMessage] = []
    lifetime = tool.key_lifetime.total_seconds()
    trusted = lifetime * (1.0 - DEFAULT_POLICY.key_margin)
    call = tool.timeout * tool.requests_per_call
    requests = tool.requests_per_call
    if trusted + call >= lifetime:
        out.append(
            _error(
                f"tool {name}: its provider keeps keys {_span(lifetime)}, yet a retry with the "
                f"same key may begin up to {_span(trusted)} after the step is recorded (while "
                f"the key is trusted) and go on sending for one call, {_span(call)} "
                f"({requests} request(s) of up to {tool.timeout:g} s): its last request could "
                "reach the provider after the key died, and be taken for a new effect",
                "Check the provider's key lifetime (it must be over ten times one call), or "
                "lower the tool's timeout (TOOL_TIMEOUTS) or its library's own retries.",
                5,
            )
        )
        return out
    rounds = tuple(float(s) for s in settings.RECONCILE_SCHEDULE)
    if not rounds:
        return out
    # From the step's recording to the last round's retry, on time: the first call, every
    # wait, and each round's lookup (a full effect) and retry before it, then its own lookup.
    lookup = call if tool.cost == CostClass.FULL else 0.0
    last = call + sum(rounds) + (len(rounds) - 1) * (lookup + call) + lookup
    if last >= trusted:
        out.append(
            Warning(
                f"tool {name}: its provider keeps keys {_span(lifetime)}, and the journal trusts "
                f"them {_span(trusted)}; the last round of RECONCILE_SCHEDULE, on time, would "
                f"retry {_span(last)} after the step is recorded (the first call, every wait, "
                "and each round's lookup and retry): a step still unknown by then is only "
                "looked up, then given to a person, never sent again with its key",
                hint="Check the provider's key lifetime, or shorten RECONCILE_SCHEDULE.",
                id="agentops.W105",
            )
        )
    return out


def tool_problems(tool: Tool, known: set[str]) -> list[CheckMessage]:
    """What is wrong with one tool's declaration, each a sentence."""
    out: list[CheckMessage] = []
    name = getattr(tool, "name", "") or type(tool).__name__
    if not getattr(tool, "description", ""):
        out.append(_error(f"tool {name}: no description", "Say what it does, for the model.", 1))
    schema = getattr(tool, "schema", None)
    if not isinstance(schema, dict) or schema.get("type") != "object":
        out.append(_error(f"tool {name}: its schema is not a JSON object schema", "", 2))
        schema = {}
    effect = tool.cost in (CostClass.CHEAP, CostClass.FULL)
    if tool.cost == CostClass.FULL and not tool.looks_up:
        out.append(
            _error(
                f"tool {name} is FULL but cannot look its effects up: a call whose reply was "
                "lost could never be settled",
                "Implement lookup() (or give an HttpTool a lookup_path), or declare it CHEAP.",
                3,
            )
        )
    if effect and not tool.evidence:
        out.append(
            _error(
                f"tool {name} names no evidence: a 200 with nothing in it would count as done",
                "Set evidence to the fields of the provider's answer that prove the effect.",
                4,
            )
        )
    if effect:
        out.extend(key_problems(tool, name))
    base = getattr(tool, "base_setting", "")
    unset = base and not str(tool_setting(base, "") or "").strip()
    if unset and not getattr(tool, "default_base", ""):
        # A warning, not an error: an app installed for some kinds may leave others' providers
        # unset. Their calls are refused as ours (never sent: a person fixes the setting).
        out.append(
            Warning(
                f"tool {name}: {base} is not set, so it has no provider to call",
                hint=f"Set {base} to the provider's address (a sandbox's in development).",
                id="agentops.W117",
            )
        )
    if tool.cost == CostClass.READ and (tool.compensation or tool.irreversible):
        out.append(_error(f"tool {name} is a READ: it has nothing to undo", "", 6))
    if tool.compensation is not None and tool.compensation not in known:
        out.append(
            _error(f"tool {name}: its undo {tool.compensation!r} is not a declared tool", "", 7)
        )
    if tool.compensation is not None and type(tool).undo_args is Tool.undo_args:
        out.append(
            _error(
                f"tool {name} names an undo but not how its evidence becomes the undo's arguments",
                "Implement undo_args(args, evidence): code, never a model, decides it.",
                8,
            )
        )
    if tool.compensation is not None and tool.irreversible:
        out.append(_error(f"tool {name} has an undo and says it is irreversible", "", 9))
    if tool.money is not None:
        props = schema.get("properties", {})
        missing = [a for a in (tool.money.amount, tool.money.currency) if a not in props]
        if missing:
            out.append(
                _error(f"tool {name}: its money arguments {missing} are not in its schema", "", 10)
            )
    return out


def kind_problems(known: dict[str, Tool], unmade: frozenset[str] = frozenset()) -> list[Error]:
    """Every kind's tools declared, its money capped, its saga placeable, its tasks decidable.
    ``unmade``: tools declared but not made (their own errors say why): judged by name only."""
    out: list[Error] = []
    for kind in registry.kinds.values():
        unknown = sorted(t for t in kind.tools if t not in known and t not in unmade)
        if unknown:
            out.append(_error(f"kind {kind.name}: tools {unknown} are not declared", "", 11))
        money = sorted(t for t in kind.tools if t in known and known[t].money is not None)
        if money and not kind.money_caps:
            out.append(
                _error(
                    f"kind {kind.name} uses {money}, which move money, and caps none",
                    "Give it money_caps: minor units a task may move, per currency.",
                    12,
                )
            )
        if kind.saga is not None:
            for step in kind.saga.steps:
                tool = known.get(step)
                if step in unmade:
                    continue
                if tool is None:
                    out.append(_error(f"kind {kind.name}: saga step {step} is unknown", "", 13))
                elif tool.compensation is None and not tool.irreversible:
                    out.append(
                        _error(
                            f"kind {kind.name}: saga step {step} has no undo and is not "
                            "irreversible: it cannot be placed without a person",
                            "Give the tool a compensation, or mark it irreversible.",
                            14,
                        )
                    )
        closing = kind.closing
        if closing is not None and closing.tool not in unmade:
            tool = known.get(closing.tool)
            if tool is None or closing.tool not in kind.tools:
                out.append(
                    _error(
                        f"kind {kind.name}: its closing call's tool {closing.tool} is not one "
                        "of its declared tools",
                        "Name a tool the kind binds (binds) and that is registered.",
                        19,
                    )
                )
            elif not tool.irreversible or tool.compensation is not None:
                out.append(
                    _error(
                        f"kind {kind.name}: its closing call's tool {closing.tool} is not "
                        "irreversible: it is made once the task's effects are undone, and "
                        "nothing would undo it",
                        "Close with an irreversible tool (a message).",
                        19,
                    )
                )
        if kind.name not in registry.playbooks and settings.PLANNER == "scripted":
            out.append(
                _error(
                    f"kind {kind.name} has no playbook, and PLANNER is scripted: its tasks "
                    "could never be decided",
                    "register_playbook(kind) in its app, or use a model planner.",
                    15,
                )
            )
    return out


def declarations(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Every declared tool and kind, checked; the registry's own refusals first."""
    out: list[CheckMessage] = [_error(p, "", 0) for p in registry.problems]
    known: dict[str, Tool] = {}
    unmade: set[str] = set()
    for name, factory in registry.tools.items():
        try:
            known[name] = factory()
        except SettingMissing as exc:  # named, with where to set it: never a traceback
            unmade.add(name)
            out.append(
                _error(
                    f"tool {name}: {exc}",
                    f"Set {exc.setting}: in the environment ({exc.setting}=...) or in your "
                    "settings module.",
                    18,
                )
            )
        except Exception as exc:  # a tool that cannot even be made
            unmade.add(name)
            out.append(_error(f"tool {name} cannot be made: {type(exc).__name__}: {exc}", "", 16))
    for tool in known.values():
        out.extend(tool_problems(tool, set(known) | unmade))
    out.extend(kind_problems(known, frozenset(unmade)))
    return out
