"""The chaos run: the service ``manage.py chaos`` calls (docs/proof.md).

It starts the run's world (devtools.chaos.world), starts the plan's tasks at their moments
(for the mcp harness, hands each to its agent, which asks agentops' MCP server for it:
devtools.chaos.agent), does the plan's faults at theirs, acts as the operator who approves
(or rejects) held trips, clears the provider faults when the fault window ends, lets
reconciliation run to its deadline, stops the workers, and audits the journal (or the naive
loop's records; for the mcp harness, the journal and every answer its agent was given)
against the providers' ledgers (devtools.chaos.audit).

By concern:

- ``base``: the harnesses, the run's refusal to start (:class:`ChaosRefused`), reading the
  database while the run restarts it;
- ``service``: :func:`chaos_run`, the loop that drives the run, and what it reads back;
- ``driver``: :class:`Driver`, the run as it goes: its tasks, the operator, its faults, its
  workers, what it watches;
- ``mcp``: the mcp harness's clients, agent and the owners of its intents' tasks;
- ``progress``: the progress bar;
- ``details``: what the run keeps beside its logs (the journal of each slow task).

The code a run ran, recorded with its figures, is devtools.chaos.code's.
"""

from devtools.chaos.report import MUST_BE_ZERO
from devtools.chaos.run.base import HARNESSES, ChaosRefused
from devtools.chaos.run.service import chaos_run

__all__ = ["HARNESSES", "MUST_BE_ZERO", "ChaosRefused", "chaos_run"]
