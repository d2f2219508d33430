"""Redis refuses what agentops never sends (issue 15).

Whoever holds the Redis password (REDIS_URL) could run Lua (the Lua of Redis 6.2 has known
memory bugs), rewrite users, stop the server, empty it, write files or replicate. The Redis
that scripts/stack.py starts gives that password every command but Redis's admin, dangerous
and scripting ones, keeping of those only what rq sends; rq's own Lua scripts are loaded by
the launcher, and no client may load another. Checked on the Redis this very run uses.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
import uuid
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
import redis
import rq
from rq import Queue
from rq.scheduler import RQScheduler
from rq.scripts import acquire_or_refresh_lock, release_lock
from rq.serializers import JSONSerializer

from agentops.workers import AgentopsJob
from devtools.stack.redis import rq_scripts

# Checked on the Redis scripts/stack.py started and configured, not on one given by REDIS_URL.
pytestmark = pytest.mark.stack("redis")

NOKEY = "agentops:test:no-such-key"

# Each as it would run harmlessly if Redis accepted it (a bad argument, a key that does not
# exist), so that a Redis that does not refuse it says so without being changed.
REFUSED: tuple[tuple[str, ...], ...] = (
    # Lua: any script at all, and the cache rq's scripts live in.
    ("EVAL", "return 1", "0"),
    ("EVAL_RO", "return 1", "0"),
    ("EVALSHA_RO", hashlib.sha1(b"return 1", usedforsecurity=False).hexdigest(), "0"),
    ("SCRIPT", "LOAD", "return 1"),
    ("SCRIPT", "FLUSH", "BOGUS"),
    ("SCRIPT", "KILL"),
    ("SCRIPT", "DEBUG", "BOGUS"),
    ("FUNCTION", "LIST"),
    ("FCALL", "f", "0"),
    ("FCALL_RO", "f", "0"),
    # Users, settings, modules, the server's life.
    ("ACL", "WHOAMI"),
    ("CONFIG", "GET", "dir"),
    ("MODULE", "LIST"),
    ("DEBUG", "HELP"),
    ("SHUTDOWN", "BOGUS"),
    ("FAILOVER", "BOGUS"),
    # Other clients.
    ("CLIENT", "KILL", "203.0.113.1:1"),
    ("CLIENT", "PAUSE", "BOGUS"),
    ("CLIENT", "UNPAUSE"),
    ("CLIENT", "REPLY", "BOGUS"),
    ("CLIENT", "TRACKING", "BOGUS"),
    ("CLIENT", "UNBLOCK", "0"),
    ("CLIENT", "NO-EVICT", "BOGUS"),
    ("MONITOR",),
    # Everything at once: emptied, listed, swapped, moved in or out.
    ("FLUSHALL", "BOGUS"),
    ("FLUSHDB", "BOGUS"),
    ("KEYS", NOKEY),
    ("SWAPDB", "BOGUS", "1"),
    ("MIGRATE", "127.0.0.1", "1", NOKEY, "0", "1", "BOGUS"),
    ("RESTORE", NOKEY, "0", "BOGUS"),
    ("RESTORE-ASKING", NOKEY, "0", "BOGUS"),
    ("SORT", NOKEY),
    # Files and replication.
    ("SAVE",),
    ("BGSAVE", "BOGUS"),
    ("BGREWRITEAOF",),
    ("LASTSAVE",),
    ("SLAVEOF", "NO", "ONE"),
    ("REPLICAOF", "NO", "ONE"),
    ("SYNC",),
    ("PSYNC", "?", "-1"),
    ("REPLCONF", "BOGUS", "1"),
    ("ROLE",),
    ("CLUSTER", "INFO"),
    # Introspection and self-tests.
    ("SLOWLOG", "LEN"),
    ("LATENCY", "HELP"),
    ("PFDEBUG", "GETREG", NOKEY),
    ("PFSELFTEST",),
)


def _redis_url() -> str:
    return os.environ["REDIS_URL"]  # stack.py's own (the module's marker)


def _command(*args: str) -> bytes:
    parts = [f"*{len(args)}\r\n".encode()]
    for arg in args:
        data = arg.encode()
        parts += [f"${len(data)}\r\n".encode(), data, b"\r\n"]
    return b"".join(parts)


def _first_line_of_reply(*command: str) -> str:
    """What Redis first answers to `command`, on a connection of its own (MONITOR, SYNC and
    PSYNC, if accepted, turn the connection into something else)."""
    url = urlsplit(_redis_url())
    assert url.hostname is not None and url.port is not None
    with socket.create_connection((url.hostname, url.port), timeout=30) as sock:
        sock.sendall(_command("AUTH", unquote(url.password or "")) + _command(*command))
        replies = sock.makefile("rb")
        assert replies.readline() == b"+OK\r\n"
        return replies.readline().decode(errors="replace").strip()


def _refused(reply: str) -> bool:
    # NOPERM: the user may not run it. Unknown: a command this Redis does not have at all
    # (FUNCTION and the read-only EVALs came with Redis 7).
    return reply.startswith("-NOPERM") or reply.startswith("-ERR unknown command")


def test_redis_refuses_every_command_agentops_never_sends() -> None:
    replies = {" ".join(command): _first_line_of_reply(*command) for command in REFUSED}
    accepted = {command: reply for command, reply in replies.items() if not _refused(reply)}
    assert accepted == {}


@pytest.fixture
def client() -> redis.Redis:
    return redis.Redis.from_url(_redis_url())


def test_what_rq_sends_of_those_families_still_works(client: redis.Redis) -> None:
    """The scheduler's lock (EVALSHA of rq's scripts, in a pipeline too: SCRIPT EXISTS), the
    operators' "empty queue" (another of rq's scripts), a worker's name and address (CLIENT
    SETNAME, INFO, LIST), the server's version (INFO). The workers the other tests start do
    the rest for real."""
    name = f"agentops-test-{uuid.uuid4().hex}"
    lock = f"agentops:test:lock:{name}"
    assert acquire_or_refresh_lock(client, lock, "me", 10) == "acquired"
    assert acquire_or_refresh_lock(client, lock, "me", 10) == "refreshed"
    assert acquire_or_refresh_lock(client, lock, "someone else", 10) == "taken"
    assert release_lock(client, lock, "me") is True

    scheduler = RQScheduler([name], connection=client)
    assert scheduler.acquire_locks() == {name}
    scheduler.heartbeat()  # the lock script inside a pipeline
    assert scheduler.acquired_locks == {name}
    scheduler.release_locks()
    assert not client.exists(scheduler.get_locking_key(name))

    queue = Queue(name, connection=client, job_class=AgentopsJob, serializer=JSONSerializer)
    queue.enqueue("agentops.jobs.run_task", "not-a-task")
    assert queue.count == 1
    assert queue.empty() == 1
    assert queue.count == 0
    queue.delete()

    assert client.client_setname(name)
    assert client.client_info()["name"] == name
    assert name in {c["name"] for c in client.client_list()}
    assert client.info("server")["redis_version"]


def test_the_launcher_loaded_every_lua_script_rq_registers(client: redis.Redis) -> None:
    """rq registers its Lua scripts in these places, and the launcher loaded them all: one
    it did not would fail with NOPERM in the app. A new one in an upgrade of rq fails here."""
    registered = {
        str(path.relative_to(Path(rq.__file__).parent)): len(
            re.findall(r"\.register_script\(", path.read_text())
        )
        for path in Path(rq.__file__).parent.rglob("*.py")
    }
    assert {path: n for path, n in registered.items() if n} == {
        "scripts.py": 4,  # unique enqueue and schedule, the scheduler's lock and its release
        "scheduler.py": 1,  # the lock again, in the heartbeat's pipeline
        "queue.py": 1,  # Queue.empty
        "rate_limit.py": 4,
    }
    scripts = rq_scripts()
    assert len(scripts) == 9
    shas = [hashlib.sha1(script, usedforsecurity=False).hexdigest() for script in scripts]
    assert client.script_exists(*shas) == [True] * len(shas)
