"""The production path, measured: what a worker does for a job, minus only RQ's dequeue.

Each task is run by ``agentops.jobs.run_task`` — the RQ job's own function — so everything a
real job pays is paid here: reading the task, building its tools and its kind's rules,
taking the lease, the scripted planner, the schema check of every call, the kind's bindings
and money cap, the guard and once-per-object indexes (every call names an invoice of its
own, once per invoice), the telemetry read after the run, and an HTTP call per step to a
provider that does nothing (``devtools.bench.noop_server``, kept-alive loopback HTTP).

The kind is declared with the extension API like any app's, but only in the processes that
run the benchmark (:func:`install`): it is tooling, never registered by the product.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from agentops.effects import (
    NO_CONTROL,
    CostClass,
    HttpTool,
    Kind,
    Money,
    Ref,
    refs_object,
    register_kind,
    register_playbook,
    register_tool,
    registry,
)
from devtools.bench.stats import percentile
from devtools.process import end, free_port, spawn, wait_for_port
from journal.protocols import Call, Decision, Finish, TaskFacts

KIND = "bench_pay"
TOOL = "bench_pay_invoice"
BASE_SETTING = "BENCH_NOOP_API_BASE"
INVOICE = {"type": "string", "pattern": "^INV-[A-Za-z0-9-]{1,80}$", **NO_CONTROL}
AMOUNT = 100  # minor units a step moves: 20 steps stay under the kind's cap


class PayInvoice(HttpTool):
    """Pays an invoice at a provider that does nothing: a full effect, keyed, once per
    invoice, with the money it moves checked against the task's cap."""

    name = TOOL
    description = "Pay an invoice (benchmark: the provider does nothing)."
    schema = {
        "type": "object",
        "properties": {
            "invoice": INVOICE,
            "customer": {"type": "string", "maxLength": 64, **NO_CONTROL},
            "amount": {"type": "integer", "minimum": 1},
            "currency": {"enum": ["eur"]},
        },
        "required": ["invoice", "customer", "amount", "currency"],
        "additionalProperties": False,
    }
    cost = CostClass.FULL
    base_setting = BASE_SETTING
    key_lifetime_setting = "BENCH_NOOP_KEY_LIFETIME_SECONDS"
    path = "/v1/noop"
    key_field = "reference"
    lookup_path = "/v1/noop"
    evidence = ("id",)
    keep = ("status",)
    money = Money(amount="amount", currency="currency")

    def guard(self, args: Mapping[str, Any]) -> str | None:
        return f"invoice:{args['invoice']}"

    def once(self, args: Mapping[str, Any]) -> bool:
        return True


BENCH_KIND = Kind(
    name=KIND,
    description="Benchmark: pay a run of invoices, each once.",
    refs_schema=refs_object(
        {
            "batch": {"type": "string", "pattern": "^[A-Za-z0-9-]{1,60}$"},
            "customer": {"type": "string", "maxLength": 64, **NO_CONTROL},
            "steps": {"type": "integer", "minimum": 1, "maximum": 100_000},
        },
        ["batch", "customer", "steps"],
    ),
    binds={TOOL: (Ref("customer", "customer"),)},
    money_caps={"eur": AMOUNT * 100_000},
    max_steps=100_001,
    references=("batch",),
)


# Called with each decision's step number just before it is made, when set: how the cost
# of one step is counted between two decisions (the server's counters, devtools.bench.server).
on_decide: Callable[[int], None] | None = None


def playbook(facts: TaskFacts) -> Decision:
    """Pay invoice 0, 1, … of the task's batch, then finish."""
    n = len(facts.steps)
    if on_decide is not None:
        on_decide(n)
    if n < int(facts.refs["steps"]):
        return Call(
            TOOL,
            {
                "invoice": f"INV-{facts.refs['batch']}-{n}",
                "customer": facts.refs["customer"],
                "amount": AMOUNT,
                "currency": "eur",
            },
        )
    return Finish("paid")


@dataclass(frozen=True)
class NoopProvider:
    """The provider that does nothing, running: its address and its process."""

    url: str
    pid: int


@contextlib.contextmanager
def noop_provider() -> Iterator[NoopProvider]:
    """The provider that does nothing, in a process of its own."""
    port = free_port()
    proc = spawn([sys.executable, "-m", "devtools.bench.noop_server", str(port)], env=None)
    try:
        wait_for_port(port, what="the no-op provider", timeout=15, proc=proc)
        yield NoopProvider(url=f"http://127.0.0.1:{port}", pid=proc.pid)
    finally:
        end(proc, timeout=5)


def install(noop_url: str) -> None:
    """Declare the kind, its tool and its playbook in this process, pointed at the provider."""
    setattr(settings, BASE_SETTING, noop_url)  # noqa: B010 - a setting of the benchmark's own
    setattr(settings, "BENCH_NOOP_KEY_LIFETIME_SECONDS", 86_400.0)  # noqa: B010
    if KIND not in registry.kinds:
        register_tool(PayInvoice)
        register_kind(BENCH_KIND)
        register_playbook(KIND)(playbook)


def ranges_as_kept() -> dict[str, Any]:
    """The journal's ranges as a deployment holds them once it has run as long as it keeps
    them (what ``migrate`` wrote to journal_retention: its keep before now, its ranges ahead),
    not the few of a fresh database: a cached plan of a statement on a partitioned table
    locks every range before it prunes them, so their count is part of a step's cost (61
    ranges a table against 2: about 6% more of PostgreSQL's CPU a step, measured while
    issue 19 was open). Returns the keep, in seconds (None: kept for good, and nothing is
    made), and how many ranges each table has then, its default range included."""
    from django.db import connections

    from agentops.dbroles import OWNER_ALIAS

    owner = connections[OWNER_ALIAS if OWNER_ALIAS in settings.DATABASES else "default"]
    with owner.cursor() as cursor:
        cursor.execute("SELECT keep_seconds FROM journal_retention WHERE id = 1")
        row = cursor.fetchone()
        keep = row[0] if row is not None else None
        if keep:
            cursor.execute(
                "SELECT journal_partitions_make(now() - make_interval(secs => %s), now())",
                [keep],
            )
        cursor.execute(
            "SELECT count(*) FROM pg_inherits WHERE inhparent = 'journal_step'::regclass"
        )
        (ranges,) = cursor.fetchone()
    return {"keep_seconds": keep or None, "ranges_per_table": ranges}


def exchange_probe(*, times: int = 200) -> float:
    """What one exchange with the provider that does nothing costs here, made as a step makes
    it: the median, in µs, of ``times`` calls of the benchmark tool's own ``call`` (the
    product's HTTP client: a kept-alive POST with its key and body, the answer read and its
    evidence taken). Nothing is written to the journal. With the commit probe
    (devtools.bench.floor.commit_probe) it times the two things every production step makes,
    at their cheapest here: one durable commit with its round trip, and one exchange with
    the provider (bench.step_budget)."""
    from journal.outcomes import Reply

    tool = PayInvoice()
    args = {"invoice": "INV-probe-0", "customer": "cus_bench", "amount": AMOUNT, "currency": "eur"}
    prefix = f"probe-{time.time_ns()}"
    took = []
    for i in range(times):
        began = time.perf_counter()
        seen = tool.call(args, key=f"{prefix}-{i}")
        took.append(time.perf_counter() - began)
        if not isinstance(seen, Reply) or seen.status >= 300:
            raise RuntimeError(f"the provider that does nothing did not answer: {seen!r}")
    return round(percentile(took, 50) * 1e6, 1)


def tasks_make(*, count: int, per_task: int, batch: str) -> list[str]:
    """``count`` tasks of the kind, created as ``task_start`` would (checked at the door),
    without ringing for a worker: the benchmark runs them itself."""
    from agentops.kinds import kind_get, task_problems
    from journal.record import task_create

    ids = []
    for i in range(count):
        refs = {"batch": f"{batch}-{i}", "customer": "cus_bench", "steps": per_task}
        problems = task_problems(kind=kind_get(KIND), goal="bench: pay", refs=refs)
        if problems:
            raise RuntimeError(f"the bench task was refused: {problems}")
        ids.append(str(task_create(kind=KIND, goal="bench: pay", refs=refs).pk))
    return ids


def run(task_ids: list[str]) -> float:
    """Seconds to run the tasks one after another, each as one RQ job would."""
    from agentops.jobs import run_task

    began = time.perf_counter()
    for task_id in task_ids:
        stopped = run_task(task_id)
        if stopped != "finished":
            raise RuntimeError(f"a bench task stopped {stopped}")
    return time.perf_counter() - began


def step_cost(*, steps: int = 200) -> dict[str, Any]:
    """What one step of a ``steps``-step task costs, as the server counted it: statements
    (round trips: nothing here pipelines) and commits at step 2 and at the last step, WAL
    bytes per step and the share of settlements that were HOT updates, over the whole task."""
    global on_decide
    from django.db import connection, connections

    from agentops.dbroles import OWNER_ALIAS
    from devtools.bench.server import ServerCounters

    owner = connections[OWNER_ALIAS if OWNER_ALIAS in settings.DATABASES else "default"]
    counters = ServerCounters(owner, role=connection.settings_dict["USER"])
    why_not = counters.available()
    if why_not is not None:
        raise RuntimeError(why_not)
    (task_id,) = tasks_make(count=1, per_task=steps, batch=f"cost-{time.time_ns()}")
    marks = []
    on_decide = lambda n: marks.append(counters.mark())  # noqa: E731
    try:
        run([task_id])
    finally:
        on_decide = None
    end = counters.mark()
    step_2 = counters.between(marks[1], marks[2])
    last = counters.between(marks[-2], marks[-1])
    whole = counters.between(marks[0], end)
    return {
        "step_2": {"round_trips": step_2.statements, "commits": step_2.commits},
        f"step_{steps}": {"round_trips": last.statements, "commits": last.commits},
        "wal_bytes_per_step": round(whole.wal_bytes / steps, 1),
        "step_updates": whole.step_updates,
        "hot_update_share": round(whole.step_hot_updates / max(1, whole.step_updates), 3),
        "runner_cpu_us": runner_cpu_by_position(steps=steps),
    }


def runner_cpu_by_position(*, steps: int = 200, window: int = 40, tasks: int = 5) -> dict[str, Any]:
    """The runner's CPU a step (µs) near the start of a ``steps``-step task and at its end:
    whether a step costs more as its task grows (the facts the runner keeps, the checks made
    before every call), which the server's counters cannot see. Each of ``tasks`` tasks, with
    nothing else measured, gives the median over ``window`` steps from its second (its
    first has no settlement to carry), and over its last ``window``; the figures are the
    medians of those, the host's passing slowness being larger than one step."""
    global on_decide
    firsts, lasts = [], []
    for task_id in tasks_make(count=tasks, per_task=steps, batch=f"cpu-{time.time_ns()}"):
        cpu: list[float] = []
        on_decide = lambda n: cpu.append(time.process_time())  # noqa: B023, E731
        try:
            run([task_id])
        finally:
            on_decide = None
        # cpu[n] is read as the decision after n steps is asked for: cpu[n+1] - cpu[n] is
        # step n+1
        per_step = [(b - a) * 1e6 for a, b in zip(cpu, cpu[1:], strict=False)]
        firsts.append(percentile(per_step[1 : 1 + window], 50))
        lasts.append(percentile(per_step[-window:], 50))
    return {
        "window": window,
        "tasks": tasks,
        "first": round(percentile(firsts, 50), 1),
        "last": round(percentile(lasts, 50), 1),
    }
