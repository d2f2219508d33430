"""Four workers and two sweepers on four hosts (network namespaces), cut from PostgreSQL and from
Redis in turn: nothing happens twice, no task is stranded (issue 36).

Each host is a network namespace of its own (devtools/cluster/network.py), its processes
started with exactly the deployment recipe's command lines (deploy/systemd, through
devtools/deploy_units.py): one worker on each host, a sweeper on the first two, as
deploy/README.md says to run them. PostgreSQL, Redis and the sandbox providers are reached
across the bridge through relays (devtools/cluster/relay.py), each of which can cut one host
from its service as a partition does: the host's bytes go nowhere, its connections hang.

While renewals run: the third host is cut from PostgreSQL for longer than a lease (its worker
hangs mid-task and another takes the task over; its late write is fenced), the fourth from
Redis (its worker cannot take jobs; the others do), and Redis loses every job once (the
sweepers ring again). Then, against the providers' ledgers: one charge and one receipt per
invoice, every task finished, and steps recorded by workers on at least three hosts.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from django.conf import settings

from devtools import deploy_units
from devtools.cluster import network
from devtools.cluster.relay import Relay
from devtools.database import database_url
from devtools.process import Popen, end, spawn
from journal.models import Entry, EntryKind, Task
from tests.agentops.sandboxed import sandbox_settings
from tests.agentops.test_business_effects import charges_of
from tests.agentops.test_runner import effects, renewal
from tests.agentops.workers import quiet_world
from tests.sandbox.fixtures import SandboxHandle, wait_for

pytestmark = [pytest.mark.usefixtures("committed", "clean_faults"), pytest.mark.timeout(240)]

HOSTS = 4
RENEWALS = 16
LEASE_SECONDS = 3.0


def moved(url: str, host: str) -> str:
    """``url`` (a service on our loopback) as a host across the bridge reaches it."""
    parts = urlsplit(url)
    netloc = parts.netloc.replace("127.0.0.1", host).replace("localhost", host)
    return urlunsplit(parts._replace(netloc=netloc))


@pytest.fixture
def hosts(
    committed: None,
    payments_sandbox: SandboxHandle,
    mail_sandbox: SandboxHandle,
    bookings_sandbox: SandboxHandle,
    tmp_path: Path,
) -> Iterator[dict[str, Any]]:
    assert network.available(), "the hosts test needs root and iproute2 (CI runs as root)"
    redis = quiet_world()
    net = network.Network.create(HOSTS)
    gateway = net.gateway
    urls = {
        "DATABASE_URL": database_url("worker"),
        "REDIS_URL": settings.REDIS_URL,
        **{
            name: str(value)
            for name, value in sandbox_settings(
                payments_sandbox, mail_sandbox, bookings_sandbox
            ).items()
        },
    }
    relays: dict[str, Relay] = {}
    started: list[Popen] = []
    sandboxes = (payments_sandbox, mail_sandbox, bookings_sandbox)
    try:
        for sandbox in sandboxes:  # reached through a relay, under the bridge's address
            sandbox.client.config(host_names=[gateway])
        for name in (
            "DATABASE_URL",
            "REDIS_URL",
            "STRIPE_API_BASE",
            "MAIL_API_BASE",
            "BOOKINGS_API_BASE",
        ):
            parts = urlsplit(urls[name])
            assert parts.hostname in ("127.0.0.1", "localhost") and parts.port, urls[name]
            relays[name] = Relay((gateway, parts.port), ("127.0.0.1", parts.port), name).start()
            urls[name] = moved(urls[name], gateway)
        env = deploy_units.environment(
            **urls,
            TOOL_TIMEOUT_SECONDS="1",
            JOURNAL_LEASE_SECONDS=str(LEASE_SECONDS),
            RECONCILE_SCHEDULE="0.2,0.3,0.5,0.5,1,1,2,2,2",
        )

        def start(host: int, unit: str, instance: str = "") -> Popen:
            argv = net.enter(host, uid=None, gid=None) + deploy_units.command(
                unit, instance=instance
            )
            log = tmp_path / f"host{host}-{unit}{instance}.log"
            proc = spawn(argv, env=env, cwd=deploy_units.REPO, output=log)
            started.append(proc)
            return proc

        for host in range(HOSTS):
            start(host, "agentops-worker@.service", instance="1")
        for host in (0, 1):
            start(host, "agentops-sweeper.service")
        yield {"net": net, "relays": relays, "procs": started, "redis": redis, "logs": tmp_path}
    finally:
        end(*started, timeout=30)
        for relay in relays.values():
            relay.stop()
        net.remove()
        for sandbox in sandboxes:
            sandbox.client.config(host_names=[])
        redis.flushdb()


def test_four_workers_and_two_sweepers_on_four_hosts_cut_in_turn_do_nothing_twice(
    hosts: dict[str, Any], payments_sandbox: SandboxHandle, mail_sandbox: SandboxHandle
) -> None:
    net, relays = hosts["net"], hosts["relays"]
    # Each charge holds its worker a moment, so that the cuts find tasks in the middle.
    payments_sandbox.client.fault(
        "payment_intents.create", "latency_before_effect", delay=0.4, times=None
    )
    tasks = [renewal() for _ in range(RENEWALS)]
    ids = [t.pk for t in tasks]

    def finished() -> int:
        dead = [p.args[-4:] for p in hosts["procs"] if p.poll() is not None]
        assert not dead, f"exited: {dead}; logs in {hosts['logs']}"
        return Task.objects.filter(pk__in=ids, status="finished").count()

    wait_for(lambda: finished() >= 2, timeout=60, interval=0.05, what="the first renewals")
    third, fourth = net.address(2), net.address(3)
    cut_worker = hosts["procs"][2].pid  # nsenter runs the worker in its own place
    relays["DATABASE_URL"].cut(third)
    relays["REDIS_URL"].cut(fourth)
    held = list(
        Task.objects.filter(pk__in=ids, lease_owner__contains=f":{cut_worker} ").values_list(
            "pk", flat=True
        )
    )
    hosts["redis"].flushdb()  # every job lost: the sweepers ring again for what is left
    done_at_cut = finished()
    wait_for(
        lambda: (
            finished() >= done_at_cut + 4
            and Task.objects.filter(pk__in=held, status="finished").count() == len(held)
        ),
        timeout=60,
        interval=0.05,
        what="the other hosts to go on, and take over what the cut worker held",
    )
    # What the cut worker held was finished by others while it was cut: its lease ran out.
    assert all(f":{cut_worker} " not in t.lease_owner for t in Task.objects.filter(pk__in=held))
    relays["DATABASE_URL"].heal(third)
    relays["REDIS_URL"].heal(fourth)
    wait_for(
        lambda: finished() == RENEWALS,
        timeout=120,
        interval=0.1,
        what=f"every renewal to finish (logs in {hosts['logs']})",
    )
    assert Task.objects.filter(pk__in=ids).exclude(attention_code="").count() == 0
    for task in tasks:
        assert effects(task, payments_sandbox, mail_sandbox) == {
            "charge_customer": 1,
            "send_email": 1,
        }
        assert len(charges_of(payments_sandbox, task.refs["invoice"])) == 1
    owners = set(
        Entry.objects.filter(task__in=tasks, kind=EntryKind.STEP_RECORDED).values_list(
            "data__by", flat=True
        )
    )
    assert len(owners) >= 3, owners
