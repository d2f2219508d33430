"""What agentops tells the people who run it: metrics, and logs that join up
(docs/operating/: metrics, alerts, logs).

- ``instruments``: the counters and histograms every process records into, and the
  workers' and sweeper's heartbeat (multiprocess mode: ``PROMETHEUS_MULTIPROC_DIR``);
- ``steps``: what happened to steps, as the journal's moves returned it once committed —
  one log line each (with the task id, step key, tool and state) and the counters;
- ``collector``: the gauges, computed from PostgreSQL and Redis at scrape time;
- ``exposition``: ``/metrics``, for an allowed address or a token with ``metrics:read``.

The journal's core knows none of this: it logs nothing and imports no metrics library.
"""
