"""System checks: settings that would let two runners advance one task, refused at start.

A runner's lease must outlast the longest thing it does without writing to the journal: one
tool call or lookup (each request up to the tool's timeout, times the requests it may make
in a row). Otherwise a slow provider hands the task to a second runner mid-call — safe,
because keys and fencing hold, but wasteful and confusing. A planner's call is covered
differently: the runner stretches its lease by the planner's budget before asking
(journal.run), so only tools are checked here.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning, register

from agentops.effects import declarations, intent_checks

# What the installed apps declare: each misdeclared tool or kind, refused with a sentence.
register()(declarations)
# And each intent served over MCP (agentops/mcp): its kind, effect and READ tools.
register()(intent_checks)


@register()
def lease_outlasts_tool_calls(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    from agentops.effects._registry import tools_made

    lease = float(settings.JOURNAL_LEASE_SECONDS)
    errors: list[CheckMessage] = []
    for tool in tools_made().values():
        longest = tool.timeout * tool.requests_per_call
        if longest >= lease:
            errors.append(
                Error(
                    f"JOURNAL_LEASE_SECONDS ({lease:g}) is not longer than the longest call or "
                    f"lookup of {tool.name} ({tool.requests_per_call} request(s) of up to "
                    f"{tool.timeout:g} s = {longest:g} s)",
                    hint="Raise JOURNAL_LEASE_SECONDS, or lower TOOL_TIMEOUT_SECONDS / "
                    "TOOL_TIMEOUTS for that tool.",
                    id="agentops.E001",
                )
            )
    return errors


@register()
def sweeper_finds_dead_runs_by_the_lease(
    app_configs: Any = None, **kwargs: Any
) -> list[CheckMessage]:
    """The sweeper leaves a task alone for SWEEP_GRACE_SECONDS after it was rung for (its job
    is probably still in the queue). A grace longer than the lease makes a task whose worker
    died wait for the grace rather than the lease: nothing is lost, but it is slow."""
    grace = float(settings.SWEEP_GRACE_SECONDS)
    lease = float(settings.JOURNAL_LEASE_SECONDS)
    if grace < lease:
        return []
    return [
        Warning(
            f"SWEEP_GRACE_SECONDS ({grace:g}) is not shorter than JOURNAL_LEASE_SECONDS "
            f"({lease:g}): a task whose worker died is run again only after the grace",
            hint="Lower SWEEP_GRACE_SECONDS below the lease (it only needs to outlast the "
            "usual wait of a job in the queue).",
            id="agentops.W001",
        )
    ]


@register()
def the_apps_role_is_declared(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """With an owner apart (DATABASE_OWNER_URL), every process connects as one of the roles
    `migrate` grants (DATABASE_ROLES): any other may do nothing, and would fail at its first
    statement rather than here."""
    if "owner" not in settings.DATABASES:
        return []
    role = settings.DATABASES["default"].get("USER") or ""
    if role in settings.DATABASE_ROLES:
        return []
    declared = ", ".join(sorted(settings.DATABASE_ROLES)) or "none"
    return [
        Error(
            f"DATABASE_URL connects as {role!r}, which is none of DATABASE_ROLES ({declared}): "
            "migrate grants it nothing, so it may do nothing",
            hint="Connect each process as its kind's role (the web server as the people role, "
            "the workers as the runner role), or name this role in DATABASE_ROLES.",
            id="agentops.E010",
        )
    ]


@register()
def the_runner_can_be_built(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Every worker builds the tools and the planner for each run. If they cannot be built
    (an unknown PLANNER, a missing key, an import that fails), every task would be handed to
    a person the moment it ran: refused here, at start-up, instead."""
    from agentops.effects._registry import tools_made
    from agentops.planners import planner_get

    tools = tools_made()  # one that cannot be made is said once, by agentops.E116 or E118
    try:
        planner_get(tools)
    except Exception as exc:
        return [
            Error(
                f"the planner (PLANNER={settings.PLANNER!r}) cannot be built: "
                f"{type(exc).__name__}: {exc}",
                hint="PLANNER is scripted, anthropic or openai; a model planner needs its "
                "API key (ANTHROPIC_API_KEY / OPENAI_API_KEY).",
                id="agentops.E003",
            )
        ]
    return []
