"""``manage.py bench``: what agentops' promise costs, measured in one run (docs/benchmarks.md).

The production path (the RQ job's own call on a real kind: ``production``) against the honest
floor (two prepared autocommit statements a step: ``floor``) and DBOS (``peer``), each round's
parts in a shuffled order; a step's cost as the server counts it (``server``); renewals end to
end through RQ workers and the sandboxes, with every process's CPU and memory (``e2e``,
``procs``); the operators' pages over a large journal (``dashboard``); the soak (``soak``); the
tables of docs/benchmarks.md rendered from the runs' files (``figures``).
"""
