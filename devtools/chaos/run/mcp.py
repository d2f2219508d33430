"""The chaos run's mcp harness: its API clients and agent, and which task of the
plan each of its intents' tasks carries.
"""

from __future__ import annotations

import uuid
from typing import Any

from agentops.api.auth import api_client_create
from devtools.chaos.agent import CLIENTS, Agent, AgentModel, asks_of, invoices_of
from devtools.chaos.plan import Plan
from devtools.chaos.run.base import db_or, mcp_clients
from devtools.chaos.world import World
from journal.models import Task


def agent_start(plan: Plan, world: World) -> Agent:
    """The mcp harness: its API clients (tokens with the ``mcp`` scope), the invoices its
    intents name in the payments provider's record, and its agent, talking to the world's MCP
    server."""
    tokens = {}
    for letter, name in zip(CLIENTS, mcp_clients(plan.run), strict=True):
        _, tokens[letter] = api_client_create(name=name, scopes=["mcp"])
    world.invoices_seed(invoices_of(plan.tasks))
    agent = Agent(url=world.mcp_url, tokens=tokens, model=AgentModel(seed=plan.seed), run=plan.run)
    agent.start()
    return agent


def model_said(plan: Plan, harness: str) -> dict[str, Any]:
    if harness == "mcp":
        model = AgentModel(seed=plan.seed)
        return {"slip_rate": model.rate, "most_per_task": model.most, "agent": "mcp"}
    return {"slip_rate": plan.model.rate, "most_per_task": plan.model.most}


def mcp_owners(plan: Plan, task_ids: list[str]) -> dict[str, int]:
    """Which task of the plan each intent's task carries (the first to ask for its object):
    the owner of the effects under its keys, for the causes of business duplicates."""
    first: dict[str, int] = {}
    for spec in plan.tasks:
        for ask in asks_of(spec):
            first.setdefault(ask.object.casefold(), spec.n)
    owners = {}
    rows: list[tuple[uuid.UUID, str, Any]] = db_or(
        lambda: list(Task.objects.filter(pk__in=task_ids).values_list("pk", "kind", "refs")), []
    )
    for pk, kind, refs in rows:
        if kind == "renewal":
            name = f"charge:{refs.get('invoice')}"
        else:
            row = (refs.get("invoices") or [{}])[0]
            name = f"email:reminder:{row.get('reminder')}:{row.get('invoice')}"
        if name.casefold() in first:
            owners[str(pk)] = first[name.casefold()]
    return owners
