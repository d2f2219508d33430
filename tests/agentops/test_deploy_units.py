"""The deployment recipe (deploy/: systemd units and their environment files) is what runs.

The web server, two workers (``agentops-worker@1`` and ``@2``) and two sweepers (one per host,
as the recipe says: the sweeper is not a singleton) are started with exactly the command lines
of their units, each with its unit's role, against the test's PostgreSQL, Redis and sandbox
providers. Renewals started through the HTTP API finish with one charge and one receipt per
invoice, after Redis lost their jobs (the sweepers ring for them, both of them); each process
says its version in ``/metrics``. The units' hardening is scored by ``systemd-analyze
security``, offline, as an operator would check it.
"""

from __future__ import annotations

import http.client
import json
import re
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentops.api.auth import api_client_create
from devtools import deploy_units
from devtools.database import database_url
from devtools.process import Popen, end, free_port, spawn
from journal.models import Entry, EntryKind, Task
from tests.agentops.sandboxed import sandbox_settings
from tests.agentops.test_business_effects import charges_of, renewal_refs
from tests.agentops.test_runner import effects
from tests.agentops.workers import quiet_world
from tests.journal.support import invoice
from tests.sandbox.fixtures import SandboxHandle, wait_for

pytestmark = pytest.mark.usefixtures("committed", "clean_faults")

VERSION = "7.0-units"
RENEWALS = 6
# What only the test harness sets (where the test's servers are, its speed): not a setting an
# operator's environment files would name.
HARNESS = {"PROMETHEUS_MULTIPROC_DIR"}


def test_every_unit_is_hardened_and_names_its_files() -> None:
    names = deploy_units.services()
    assert names == [
        "agentops-mcp.service",
        "agentops-migrate.service",
        "agentops-sweeper.service",
        "agentops-web.service",
        "agentops-worker@.service",
    ]
    for name in names:
        unit = deploy_units.unit(name)
        assert unit.value("Service", "WorkingDirectory") == deploy_units.RELEASE
        files = [Path(p).name for p in unit.values("Service", "EnvironmentFile")]
        assert files[0] == "common.env", name
        for file in files:
            assert (deploy_units.ENVIRONMENTS / file).exists(), (name, file)
        # Only migrate holds the owner's credentials; the rest run as their kind's role.
        owner = "DATABASE_OWNER_URL" in deploy_units.environment_names(name)
        assert owner == (name == "agentops-migrate.service"), name
        if name != "agentops-migrate.service":
            assert unit.value("Service", "Restart") == "always", name
            assert unit.value("Install", "WantedBy") == "multi-user.target", name


def test_systemd_scores_every_unit_with_its_hardening_as_ok(tmp_path: Path) -> None:
    root = tmp_path / "root"
    system = root / "etc" / "systemd" / "system"
    system.mkdir(parents=True)
    for name in deploy_units.services():
        shutil.copy(deploy_units.UNITS / name, system / name)
        (system / f"{name}.d").mkdir()
        shutil.copy(deploy_units.UNITS / "hardening.conf", system / f"{name}.d" / "hardening.conf")
    for name in deploy_units.services():
        scored = subprocess.run(
            ["systemd-analyze", "security", "--offline=true", f"--root={root}", name],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        found = re.search(r"Overall exposure level for \S+: ([0-9.]+) (\w+)", scored.stdout)
        assert found, scored.stdout + scored.stderr
        # systemd's scale: 0 (nothing exposed) to 10; "OK" is below 2.
        assert float(found.group(1)) < 2.0 and found.group(2) == "OK", (name, found.group(0))


@pytest.fixture
def hosts(
    committed: None,
    payments_sandbox: SandboxHandle,
    mail_sandbox: SandboxHandle,
    bookings_sandbox: SandboxHandle,
    tmp_path: Path,
) -> Iterator[dict[str, Any]]:
    """The web server, two workers and two sweepers, each started by its unit's command line
    with its unit's role; torn down whatever the test did."""
    redis = quiet_world()
    common = deploy_units.environment(
        **{
            name: str(value)
            for name, value in sandbox_settings(
                payments_sandbox, mail_sandbox, bookings_sandbox
            ).items()
        },
        DJANGO_STATIC_ROOT=str(tmp_path / "static"),
        AGENTOPS_VERSION=VERSION,
        TOOL_TIMEOUT_SECONDS="2",
    )
    web_port = free_port()
    started: list[Popen] = []

    def start(unit: str, role: str, instance: str = "", **extra: str) -> Popen:
        argv = deploy_units.command(unit, instance=instance)
        log = tmp_path / f"{unit}{instance}-{len(started)}.log"
        env = {**common, "DATABASE_URL": database_url(role), **extra}
        proc = spawn(argv, env=env, cwd=deploy_units.REPO, output=log)
        started.append(proc)
        return proc

    try:
        start("agentops-web.service", "web", GUNICORN_BIND=f"127.0.0.1:{web_port}")
        for i in ("1", "2"):
            start("agentops-worker@.service", "worker", instance=i)
        for _ in range(2):
            start("agentops-sweeper.service", "worker")
        yield {"port": web_port, "procs": started, "redis": redis, "logs": tmp_path}
    finally:
        end(*started, timeout=30)
        redis.flushdb()


def request(port: int, method: str, path: str, body: Any = None, **headers: str) -> Any:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        payload = None if body is None else json.dumps(body)
        sent = {"Host": "127.0.0.1", "Content-Type": "application/json", **headers}
        conn.request(method, path, body=payload, headers=sent)
        reply = conn.getresponse()
        return reply.status, reply.read()
    finally:
        conn.close()


def test_the_units_command_lines_run_renewals_to_the_end_once_with_two_sweepers(
    hosts: dict[str, Any], payments_sandbox: SandboxHandle, mail_sandbox: SandboxHandle
) -> None:
    port = hosts["port"]

    def up() -> bool:
        dead = [p.args for p in hosts["procs"] if p.poll() is not None]
        assert not dead, f"exited: {dead}; logs in {hosts['logs']}"
        try:
            return bool(request(port, "GET", "/healthz")[0] == 200)
        except OSError:
            return False

    wait_for(up, timeout=60, interval=0.1, what="the web server's unit to answer")
    # Each charge holds its worker half a second: when Redis loses the jobs, most are queued.
    payments_sandbox.client.fault(
        "payment_intents.create", "latency_before_effect", delay=0.5, times=None
    )
    _, token = api_client_create(name=f"units-{uuid.uuid4().hex[:8]}", scopes=["tasks:start"])
    invoices = [invoice() for _ in range(RENEWALS)]
    for inv in invoices:
        status, body = request(
            port,
            "POST",
            "/api/v1/tasks",
            {"kind": "renewal", "goal": "Renew the plan", "refs": renewal_refs(inv)},
            Authorization=f"Bearer {token}",
            **{"Idempotency-Key": str(uuid.uuid4())},
        )
        assert status == 201, body
    hosts["redis"].flushdb()  # the jobs lost: the sweepers must ring for what is left
    tasks = list(Task.objects.filter(refs__invoice__in=invoices))
    assert len(tasks) == RENEWALS
    wait_for(
        lambda: (
            Task.objects.filter(pk__in=[t.pk for t in tasks], status="finished").count() == RENEWALS
        ),
        timeout=120,
        interval=0.1,
        what=f"the renewals to finish (logs in {hosts['logs']})",
    )
    swept = [log.read_text() for log in hosts["logs"].glob("agentops-sweeper.service-*.log")]
    assert len(swept) == 2 and any("rang for" in text for text in swept), swept
    for task in tasks:
        assert effects(task, payments_sandbox, mail_sandbox) == {
            "charge_customer": 1,
            "send_email": 1,
        }
        assert len(charges_of(payments_sandbox, task.refs["invoice"])) == 1
        recorded = Entry.objects.filter(task=task, kind=EntryKind.STEP_RECORDED)
        assert all(
            by.endswith(f" agentops {VERSION}")
            for by in recorded.values_list("data__by", flat=True)
        )

    def versions_seen() -> set[str]:
        status, body = request(port, "GET", "/metrics")
        assert status == 200, body
        found = re.findall(
            r'agentops_version_seen_timestamp_seconds\{process="(\w+)",version="([^"]+)"\}',
            body.decode(),
        )
        return {process for process, version in found if version == VERSION}

    wait_for(
        lambda: versions_seen() >= {"web", "worker", "sweeper"},
        timeout=30,
        interval=0.2,
        what="every kind of process to say its version in /metrics",
    )
