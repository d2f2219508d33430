"""The chaos run (``manage.py chaos``, README "Proof: the chaos run").

``plan`` (the seeded tasks and faults), ``model`` (the planner both harnesses are decided
by: the playbooks, slipping as models do), ``world`` (the processes it starts and breaks),
``kill`` (the fault a worker is armed with: it kills itself at a tool call), ``naive`` (the
harness it is compared with), ``ledgers`` (what the providers really did), ``truth`` (each
task's summary against the ledgers), ``audit`` (the journal against the ledgers),
``report`` (when a run passes), ``run`` (the service the command calls) and ``figures``
(the README's tables, from the runs' JSON).
"""
