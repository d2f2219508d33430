"""The chaos run (``manage.py chaos``, docs/proof.md).

``plan`` (the seeded tasks and faults), ``model`` (the planner the safe and naive harnesses
are decided by: the playbooks, slipping as models do), ``world`` (the processes it starts and
breaks), ``kill`` (the fault a worker is armed with: it kills itself at a tool call),
``naive`` (the harness it is compared with), ``agent`` (the mcp harness's agent, a client of
agentops' MCP server that slips as models do), ``ledgers`` (what the providers really did),
``truth`` (each task's summary against the ledgers), ``audit`` (the journal, the naive loop's
record and the agent's answers against the ledgers), ``report`` (when a run passes), ``run``
(the service the command calls), ``code`` (the code a run ran) and ``figures`` (docs/proof.md's
tables, from the runs' JSON). ``agent``, ``audit`` and ``run`` are packages, split by concern.
"""
