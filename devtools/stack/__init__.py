"""The launcher: embedded PostgreSQL and Redis, then the app or a command (``make run``,
``make test``, ``make chaos``, ``make bench``; ``python -m devtools.stack --help``).

A server is started only when its URL (DATABASE_URL, REDIS_URL) is unset; otherwise that URL
is used as given. POSIX only. By concern:

- ``base``: where things are, the launcher's errors, its log and its stop signals;
- ``files``: var/ and its permissions, secrets, processes an earlier run left behind;
- ``users``: who each process runs as (when we are root, never root), what it can reach;
- ``postgres`` and ``redis``: the servers, their roles, passwords and rules;
- ``sandboxes``: the demo's stand-ins for Stripe, mail and bookings;
- ``app``: the app's processes, ``manage.py``, and the loop that keeps them running;
- ``control``: the socket through which the command we run restarts the servers;
- ``cli``: the commands.

Starting, waiting for, supervising and stopping a process is ``devtools.process``, shared
with the chaos run, the benchmark and the tests.
"""
