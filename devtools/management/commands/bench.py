"""``manage.py bench``: what agentops' promise costs, against the honest floor and a peer, in
one run (devtools/bench/; docs/benchmarks.md says what each path does and does not
include).

Run it against a throwaway database (``make bench`` starts one): it writes tasks, and with
the dashboard figures, 100,000 of them. It prints its progress on stderr and, last, one JSON
line on stdout; ``--out`` also writes that JSON to a file (docs/bench/ holds the runs
docs/benchmarks.md's figures are rendered from: ``python -m devtools.bench.figures --write
docs/benchmarks.md``).
While it runs, its own log lines go to a file, as a supervisor takes a worker's: the
production path it measures in this process writes what a production worker writes (at
``LOG_LEVEL``, by default a line a step event), and the terminal shows only the progress.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import psutil
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connections

from agentops.dbroles import OWNER_ALIAS
from devtools.bench import dashboard, e2e, floor, peer, procs, production, soak
from devtools.bench.host import Steal
from devtools.bench.machine import code, machine
from devtools.bench.stats import percentile, ratio_summary, summary
from devtools.process import REPO
from journal.models import Task

PARTS = ("floor", "production", "dbos_sequential", "dbos_concurrent")
TARGETS = {
    "production_to_floor": 0.5,
    "production_to_dbos_sequential": 2.5,
    "e2e_tasks_per_s_2_workers": 100.0,
}
# The targets judged on the CPU a step costs too (the part's, over the production path's, in
# the runner and PostgreSQL: what a slower disk cannot flatter), by the part they compare to.
CPU_JUDGED = {"production_to_floor": "floor", "production_to_dbos_sequential": "dbos_sequential"}
# The CPU a step is summed over, in every part: the process that runs the steps, and the
# database server's (the provider's is the production path's alone, and told apart).
CPU_ROLES = ("runner", "postgres")
# A window too noisy to judge a rate by (devtools/bench/host.py): the hypervisor took more
# than this share of the machine's time in the median round, or more than NOISY_STEAL_MAX in
# one; or a durable commit cost more than NOISY_COMMIT_SPREAD times as much in one round as
# in another (the floor waits for two a step and the production path for one, so a ratio of
# their rates moves with the disk).
NOISY_STEAL_MEDIAN = 0.03
NOISY_STEAL_MAX = 0.10
NOISY_COMMIT_SPREAD = 3.0


def step_budget(out: dict[str, Any]) -> dict[str, Any]:
    """Where a production step's time goes, from the run's medians (µs): the whole step (the
    inverse of its rate); the two things every step makes, at their cheapest here (a minimal
    durable commit with its round trip, and one exchange with the provider as the tool's own
    client makes it: the probes); the rest, which the harness's own work is at most (its
    statement's work in PostgreSQL beyond a minimal commit, its rules and guards, the
    planner, the checks, the telemetry, its Python); the step each target would allow (this
    step scaled by the paired ratio's median over the target, so it falls on the side of the
    target the verdict does); and the CPU each process spent a step, where it was read. The
    parts are measured apart, so they add up only as medians do."""
    step = 1e6 / out["production_steps_per_s"]["median"]
    commit = out["commit_probe"]["commit_us"]["median"]
    exchange = out["exchange_probe_us"]["median"]
    ratios = out["ratios"]
    cpu = {
        f"{role}_cpu": figures["median"]
        for role, figures in out.get("production_cpu_us_per_step", {}).items()
        if isinstance(figures, dict) and "median" in figures
    }
    return {
        **cpu,
        "step": round(step, 1),
        "commit_and_round_trip": commit,
        "provider_exchange": exchange,
        "harness": round(step - commit - exchange, 1),
        "step_at_floor_target": round(
            step * ratios["production_to_floor"]["median"] / TARGETS["production_to_floor"], 1
        ),
        "step_at_dbos_target": round(
            step
            * ratios["production_to_dbos_sequential"]["median"]
            / TARGETS["production_to_dbos_sequential"],
            1,
        ),
    }


def _production_roles(provider: int) -> tuple[procs.Roles, str | None]:
    """The processes a production step runs in: this one, the provider's and PostgreSQL's,
    with why PostgreSQL's are not among them when they are not (None when they are): a
    server elsewhere (or in a container: its backend's pid names another process here, or
    none), or one whose processes this user may not read."""
    roles = procs.Roles()
    roles.add("runner", [os.getpid()])
    roles.add("provider", [provider])
    try:
        postmaster = procs.postmaster_pid()
        server = psutil.Process(postmaster)
        with connections["default"].cursor() as cursor:
            cursor.execute("SELECT extract(epoch FROM pg_postmaster_start_time())")
            started = float(cursor.fetchone()[0])
        if not server.name().startswith("postgres") or abs(server.create_time() - started) > 1:
            return roles, "the server runs elsewhere (its backend's pid is another process here)"
        server.cpu_times()
    except psutil.AccessDenied:
        return roles, "this user may not read the server's processes"
    except psutil.Error:
        return roles, "the server runs elsewhere"
    roles.add("postgres", [postmaster])
    return roles, None


def _steal_summary(shares: list[float | None]) -> dict[str, Any] | None:
    """The hypervisor's steal over the parts measured (devtools/bench/host.py): None where
    the kernel does not say."""
    known = [share for share in shares if share is not None]
    return summary(known, 4) if known and len(known) == len(shares) else None


@contextlib.contextmanager
def _lines_to_a_file(say: Callable[[str], None]) -> Iterator[None]:
    """This process's log lines to a file until the block ends: the handlers that write to a
    stream write there instead, and a warning or an error is written to stderr as well. The
    file is removed when the block ends well, and kept, its name said, when it raises."""
    root = logging.getLogger()
    handlers = [h for h in root.handlers if type(h) is logging.StreamHandler]  # not a file's
    fd, name = tempfile.mkstemp(prefix="agentops-bench-", suffix=".log")
    loud = logging.StreamHandler(sys.stderr)
    loud.setLevel(logging.WARNING)
    if handlers:
        loud.setFormatter(handlers[0].formatter)
    with os.fdopen(fd, "a", encoding="utf-8") as lines:
        streams = [h.setStream(lines) for h in handlers]
        root.addHandler(loud)
        kept = False
        try:
            yield
        except BaseException:
            kept = True
            say(f"this run's log lines are kept in {name}")
            raise
        finally:
            root.removeHandler(loud)
            for handler, stream in zip(handlers, streams, strict=True):
                if stream is not None:
                    handler.setStream(stream)
    if not kept:
        os.unlink(name)


def only_the_benchmarks_tasks() -> bool:
    """The database holds no task but the benchmark's own (their goals say ``bench:``)."""
    return not Task.objects.exclude(goal__startswith="bench:").exists()


def _owner_url() -> str:
    alias = OWNER_ALIAS if OWNER_ALIAS in settings.DATABASES else "default"
    return peer.postgres_url(dict(connections[alias].settings_dict))


class Command(BaseCommand):
    help = "Measure the production path against the honest floor and DBOS, end to end, the pages."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--out", type=Path, help="also write the JSON to this file")
        parser.add_argument("--repeat", type=int, default=8, help="interleaved repetitions")
        parser.add_argument("--steps", type=int, default=2000, help="steps per measurement")
        parser.add_argument("--per-task", type=int, default=20, help="steps per task")
        parser.add_argument("--seed", type=int, default=1, help="the order of the parts")
        parser.add_argument("--e2e-tasks", type=int, default=600)
        parser.add_argument(
            "--e2e-repeat",
            type=int,
            default=3,
            help="end to end: runs on 1 and on 2 workers, each pair in a shuffled order "
            "(the figures are their medians)",
        )
        parser.add_argument("--dashboard-tasks", type=int, default=100_000)
        parser.add_argument("--dashboard-entries", type=int, default=1_000_000)
        parser.add_argument("--skip-e2e", action="store_true")
        parser.add_argument("--skip-dashboard", action="store_true")
        parser.add_argument(
            "--soak", action="store_true", help="the soak instead (devtools/bench/soak.py)"
        )
        parser.add_argument("--waves", type=int, default=30, help="soak: waves")
        parser.add_argument("--wave-tasks", type=int, default=1000, help="soak: tasks per wave")
        parser.add_argument(
            "--force", action="store_true", help="run even if the database holds real tasks"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if not options["force"] and not only_the_benchmarks_tasks():
            raise CommandError(
                "this database holds tasks that are not the benchmark's: run the benchmark "
                "against a throwaway database (`make bench` starts one), or pass --force"
            )
        if options["e2e_repeat"] < 1:
            raise CommandError("--e2e-repeat: at least 1")
        began = datetime.now(tz=UTC)
        with _lines_to_a_file(self._say):
            if options["soak"]:
                out = soak.soak(
                    waves=options["waves"], wave_tasks=options["wave_tasks"], say=self._say
                )
            else:
                out = self._measure(options)
        out = {
            "kind": "soak" if options["soak"] else "bench",
            "began": began.isoformat(timespec="seconds"),
            "ended": datetime.now(tz=UTC).isoformat(timespec="seconds"),
            "machine": machine(),
            "code": code(),
            "options": {k: v for k, v in options.items() if k in _RECORDED},
            **out,
        }
        line = json.dumps(out, sort_keys=True)
        if options["out"] is not None:
            options["out"].parent.mkdir(parents=True, exist_ok=True)
            options["out"].write_text(json.dumps(out, sort_keys=True, indent=1) + "\n")
        self.stdout.write(line)

    # --- the parts --------------------------------------------------------------------------

    def _measure(self, options: dict[str, Any]) -> dict[str, Any]:
        steps, per_task = options["steps"], options["per_task"]
        tasks = max(1, steps // per_task)
        measured = tasks * per_task  # the steps a round's floor and production path run
        measured_parts = list(PARTS)
        rows: dict[str, list[float]] = {part: [] for part in measured_parts}
        probes: list[floor.Probe] = []
        exchanges: list[float] = []
        # CPU a step, by part and process, each round (µs): where the server runs here.
        cpu: dict[str, dict[str, list[float]]] = {part: {} for part in PARTS}
        steals: list[float | None] = []
        have_dbos = peer.dbos_available()
        if not have_dbos:
            raise CommandError("DBOS is not installed: pip install -e '.[bench]' (make bench does)")
        order = random.Random(options["seed"])  # noqa: S311 - an order, not a secret
        out: dict[str, Any] = {}
        out["journal_ranges"] = production.ranges_as_kept()
        with production.noop_provider() as noop:
            production.install(noop.url)
            roles, postgres_unread = _production_roles(noop.pid)
            production.run(production.tasks_make(count=3, per_task=per_task, batch="warm"))
            conn = floor.connect(_owner_url())
            floor.setup(conn)
            like = floor.sample(conn)
            floor.floor_seconds(conn, steps=2 * per_task, per_task=per_task, like=like)
            postmaster = roles.pids["postgres"][0] if roles.pids.get("postgres") else None
            measure: dict[str, Callable[[int], float]] = {
                "floor": lambda r: self._timed(
                    lambda: floor.floor_seconds(conn, steps=steps, per_task=per_task, like=like),
                    steps=measured,
                    roles=roles,
                    cpu=cpu["floor"],
                ),
                # The round's tasks are made first, outside what is timed and read.
                "production": lambda r: self._timed(
                    partial(
                        production.run,
                        production.tasks_make(count=tasks, per_task=per_task, batch=f"r{r}"),
                    ),
                    steps=measured,
                    roles=roles,
                    cpu=cpu["production"],
                ),
            }
            for repetition in range(options["repeat"]):
                # What a round trip and a durable commit cost in this round, and an exchange
                # with the provider, before its parts.
                probes.append(floor.commit_probe(conn))
                exchanges.append(production.exchange_probe())
                steal = Steal()
                parts = list(measured_parts)
                order.shuffle(parts)
                for part in parts:
                    if part.startswith("dbos"):
                        rate, spent = self._dbos(part.removeprefix("dbos_"), steps, postmaster)
                        for role, value in spent.items():
                            cpu[part].setdefault(role, []).append(value)
                    else:
                        rate = measured / measure[part](repetition)
                    rows[part].append(rate)
                steals.append(steal.share())
                self._say(
                    f"round {repetition + 1}/{options['repeat']}: "
                    + ", ".join(f"{p} {rows[p][-1]:.0f}" for p in measured_parts)
                    + f" steps/s; a round trip {probes[-1].round_trip_us:.0f} us, "
                    f"a durable commit {probes[-1].commit_us:.0f} us, "
                    f"an exchange with the provider {exchanges[-1]:.0f} us"
                )
            self._say("the cost of one step, as the server counts it")
            out["per_step"] = production.step_cost(steps=200)
            conn.close()
        floor.cleanup(_owner_url())
        out["production_steps_per_s"] = summary(rows["production"])
        out["raw_floor_steps_per_s"] = summary(rows["floor"])
        out["dbos_steps_per_s"] = summary(rows["dbos_sequential"])
        out["dbos_concurrent_steps_per_s"] = summary(rows["dbos_concurrent"])
        out["commit_probe"] = {
            "round_trip_us": summary([p.round_trip_us for p in probes]),
            "commit_us": summary([p.commit_us for p in probes]),
        }
        out["exchange_probe_us"] = summary(exchanges)
        out["production_cpu_us_per_step"] = {
            **{role: summary(values) for role, values in cpu["production"].items() if values},
            # psutil reads CPU in the kernel's ticks: a figure a step is good to this much.
            "tick_us_per_step": round(1e6 / os.sysconf("SC_CLK_TCK") / measured, 1),
            **({"postgres_not_read": postgres_unread} if postgres_unread else {}),
        }
        out["cpu_us_per_step"] = {
            part: {role: summary(values) for role, values in by_role.items() if values}
            for part, by_role in cpu.items()
        }
        out["host_steal_share"] = _steal_summary(steals)
        out["window"] = window(steals, [p.commit_us for p in probes])
        out["ratios"] = {
            "production_to_floor": ratio_summary(rows["production"], rows["floor"]),
            "production_to_dbos_sequential": ratio_summary(
                rows["production"], rows["dbos_sequential"]
            ),
            "production_to_dbos_concurrent": ratio_summary(
                rows["production"], rows["dbos_concurrent"]
            ),
            # The CPU a step: the part's over the production path's (≥ 1: the production path
            # costs less), where the server's processes were read for both.
            **{
                f"{name}_cpu": ratio_summary(cpu_total(cpu[part]), cpu_total(cpu["production"]))
                for name, part in CPU_JUDGED.items()
                if postgres_unread is None
            },
        }
        out["step_budget_us"] = step_budget(out)
        out["measurement"] = {
            "steps": steps,
            "per_task": per_task,
            "order": "shuffled per round",
            # How the production path's own process logged (to a file): its LOG_LEVEL and format.
            "log_level": settings.LOG_LEVEL,
            "log_format": settings.LOG_FORMAT,
        }
        if not options["skip_e2e"]:
            out.update(
                self._e2e(options["e2e_tasks"], repeat=options["e2e_repeat"], seed=options["seed"])
            )
        if not options["skip_dashboard"]:
            out["dashboard_ms"] = self._dashboard(options)
        out["targets"] = _targets(out)
        return out

    def _timed(
        self,
        part: Callable[[], float],
        *,
        steps: int,
        roles: procs.Roles,
        cpu: dict[str, list[float]],
    ) -> float:
        """Seconds ``part`` took to run ``steps`` steps (what it returns), and the CPU each
        process spent a step meanwhile added to ``cpu``: this one (the runner: the floor's
        client, or the production path's worker), PostgreSQL's (all of its processes, when
        it runs on this machine) and the provider's."""
        before = roles.cpu_seconds()
        seconds = part()
        spent = procs.deltas(roles.cpu_seconds(), before)
        for role, value in spent.items():
            cpu.setdefault(role, []).append(round(value * 1e6 / steps, 1))
        return seconds

    def _dbos(
        self, mode: str, steps: int, postmaster: int | None
    ) -> tuple[float, dict[str, float]]:
        """DBOS's rate in ``mode``, and the CPU a step it cost (its process's, and
        PostgreSQL's where the server's processes are read here)."""
        env = {**os.environ, peer.URL_VARIABLE: _owner_url()}
        if postmaster is not None:
            env[peer.POSTMASTER_VARIABLE] = str(postmaster)
        proc = subprocess.run(  # noqa: S603 - the peer's part, in a process of its own
            [sys.executable, "-m", "devtools.bench.peer", mode, str(steps)],
            cwd=REPO,
            env=env,
            capture_output=True,
            timeout=1200,
            check=False,
        )
        if proc.returncode != 0:
            raise CommandError(f"DBOS ({mode}) failed: {proc.stderr.decode()[-2000:]}")
        said = json.loads(proc.stdout.decode().strip().splitlines()[-1])
        return float(said["steps_per_s"]), dict(said["cpu_us_per_step"])

    def _e2e(self, tasks: int, *, repeat: int, seed: int) -> dict[str, Any]:
        """``repeat`` runs of ``tasks`` renewals on 1 worker and on 2, each pair in an order
        of its own; their medians, the latencies of all their tasks, and the memory of the
        workers of the last run on 2."""
        order = random.Random(seed)  # noqa: S311 - an order, not a secret
        names = {1: "1_worker", 2: "2_workers"}
        rates: dict[str, list[float]] = {name: [] for name in names.values()}
        cpu: dict[str, list[dict[str, float]]] = {name: [] for name in names.values()}
        latency: dict[str, list[float]] = {name: [] for name in names.values()}
        steals: dict[str, list[float | None]] = {name: [] for name in names.values()}
        out: dict[str, Any] = {}
        with e2e.sandboxes() as world:
            for repetition in range(repeat):
                counts = list(names)
                order.shuffle(counts)
                for count in counts:
                    name = names[count]
                    with e2e.workers(world, count):
                        e2e.batch_run(world, tasks=20, tag=f"warm-{count}-{repetition}")
                        rss_before = world.roles.memory_mb()
                        self._say(
                            f"renewals end to end on {count} worker(s), "
                            f"run {repetition + 1}/{repeat}"
                        )
                        steal = Steal()
                        batch = e2e.batch_run(world, tasks=tasks)
                        steals[name].append(steal.share())
                        rss_after = world.roles.memory_mb()
                    rates[name].append(batch.tasks_per_s)
                    cpu[name].append(batch.cpu_ms_per_task)
                    latency[name] += batch.latency_ms
                    self._say(f"{batch.tasks_per_s:.1f} tasks/s")
                    if count == 2:
                        workers = [k for k in rss_after if k.startswith("worker")]
                        out["worker_rss_mb"] = {
                            "tasks": tasks,
                            "before": {k: rss_before[k] for k in workers},
                            "after": {k: rss_after[k] for k in workers},
                        }
        rate_figures = {name: summary(values) for name, values in rates.items()}
        out["e2e_tasks_per_s"] = {name: f["median"] for name, f in rate_figures.items()}
        out["e2e_tasks_per_s_runs"] = {name: f["values"] for name, f in rate_figures.items()}
        out["e2e_cpu_ms_per_task"] = {
            name: {role: summary([run[role] for run in runs], 2)["median"] for role in runs[0]}
            for name, runs in cpu.items()
        }
        out["e2e_host_steal_share"] = {name: _steal_summary(v) for name, v in steals.items()}
        out["e2e_latency_ms"] = {
            name: {f"p{p}": round(percentile(values, p), 1) for p in (50, 95, 99)}
            for name, values in latency.items()
        }
        return out

    def _dashboard(self, options: dict[str, Any]) -> dict[str, Any]:
        self._say(
            f"seeding {options['dashboard_tasks']:,} tasks and "
            f"{options['dashboard_entries']:,} entries"
        )
        dashboard.seed(tasks=options["dashboard_tasks"], entries=options["dashboard_entries"])
        long_task = dashboard.long_task(steps=200)
        return {
            "task_list": dashboard.render_ms(path="/"),
            "task_200_steps": dashboard.render_ms(path=f"/tasks/{long_task}"),
        }

    def _say(self, message: str) -> None:
        self.stderr.write(f"bench | {message}")
        self.stderr.flush()


_RECORDED = (
    "repeat",
    "steps",
    "per_task",
    "seed",
    "e2e_tasks",
    "e2e_repeat",
    "dashboard_tasks",
    "dashboard_entries",
    "skip_e2e",
    "skip_dashboard",
    "waves",
    "wave_tasks",
)


def cpu_total(by_role: dict[str, list[float]]) -> list[float]:
    """The CPU a step of a part cost each round in the runner and PostgreSQL together."""
    return [sum(values) for values in zip(*(by_role[r] for r in CPU_ROLES), strict=True)]


def window(steals: list[float | None], commits_us: list[float]) -> dict[str, Any]:
    """Whether the rounds' window was quiet enough to judge a rate by: the hypervisor's steal
    (its median and its worst round) and how far a durable commit's cost moved between
    rounds, against the thresholds above; and, when it was not, why."""
    known = [share for share in steals if share is not None]
    spread = max(commits_us) / min(commits_us) if commits_us and min(commits_us) > 0 else None
    why = []
    if known and percentile(known, 50) > NOISY_STEAL_MEDIAN:
        why.append(
            f"the hypervisor took {percentile(known, 50):.1%} of the machine in the median "
            f"round (more than {NOISY_STEAL_MEDIAN:.0%})"
        )
    if known and max(known) > NOISY_STEAL_MAX:
        why.append(f"it took {max(known):.1%} in one round (more than {NOISY_STEAL_MAX:.0%})")
    if spread is not None and spread > NOISY_COMMIT_SPREAD:
        why.append(
            f"a durable commit cost {spread:.1f} times as much in one round as in another "
            f"(more than {NOISY_COMMIT_SPREAD:g})"
        )
    return {
        "quiet": not why,
        "why": why,
        "steal_median": round(percentile(known, 50), 4) if known else None,
        "steal_max": round(max(known), 4) if known else None,
        "commit_spread": round(spread, 2) if spread is not None else None,
        "thresholds": {
            "steal_median": NOISY_STEAL_MEDIAN,
            "steal_max": NOISY_STEAL_MAX,
            "commit_spread": NOISY_COMMIT_SPREAD,
        },
    }


def _targets(out: dict[str, Any]) -> dict[str, Any]:
    """Each target the issue set, beside what this run measured (medians): a ratio of rates
    judged on the CPU a step too, where the run read it; and a verdict. A target is "not met"
    when the CPU a step misses it (no disk or window flatters that), or the rate does in a
    quiet window; "met" when every measure meets it and the window was quiet or the CPU
    confirms it; "too noisy to judge" otherwise."""
    ratios = out["ratios"]
    quiet = out.get("window", {}).get("quiet", True)
    judged: dict[str, Any] = {}
    for name, goal in TARGETS.items():
        if name in ratios:
            rate = ratios[name]["median"]
        else:
            rate = out.get("e2e_tasks_per_s", {}).get("2_workers")
        cpu = ratios.get(f"{name}_cpu", {}).get("median") if name in CPU_JUDGED else None
        if name not in CPU_JUDGED:  # end to end: its rate alone
            verdict = "met" if rate is not None and rate >= goal else "not met"
        elif cpu is not None and cpu < goal:
            verdict = "not met"
        elif rate is None or rate < goal:
            verdict = "not met" if quiet else "too noisy to judge"
        else:
            verdict = "met" if quiet or cpu is not None else "too noisy to judge"
        judged[name] = {
            "target": goal,
            "measured": rate,
            **({"measured_cpu": cpu} if name in CPU_JUDGED else {}),
            "met": verdict == "met",
            "verdict": verdict,
        }
    return judged
