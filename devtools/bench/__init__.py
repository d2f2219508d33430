"""``manage.py bench``: what the journal's safety costs, measured in one run.

Every figure is measured against the same PostgreSQL in the same run, repetitions
interleaved, so the ratios hold on a noisy machine: the journal's runner path against the
same two durable commits in plain psycopg and against a peer (DBOS
Transact, when its extra is installed); renewals end to end through RQ workers and the
sandbox; the cost of one step as counts (statements, round trips, WAL bytes) that do not
depend on the machine; a worker's memory over a long run; and the operators' pages over a
large journal.
"""
