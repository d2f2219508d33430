"""``manage.py bench``: the journal against plain psycopg and a peer, in one run.

Run it against a throwaway database (``make bench`` starts one): it writes tasks, and with
the dashboard figures, 100,000 of them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connections

from agentops.dbroles import OWNER_ALIAS
from devtools.bench import dashboard, e2e, peer, raw, runner
from devtools.bench.stats import summary
from devtools.process import REPO
from journal.models import Task


def _owner_url() -> str:
    alias = OWNER_ALIAS if OWNER_ALIAS in settings.DATABASES else "default"
    return peer.postgres_url(dict(connections[alias].settings_dict))


class Command(BaseCommand):
    help = "Measure the journal against plain psycopg and DBOS, end to end, and the pages."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", help="one JSON object, last line")
        parser.add_argument("--repeat", type=int, default=3, help="interleaved repetitions")
        parser.add_argument("--steps", type=int, default=2000, help="steps per measurement")
        parser.add_argument("--processes", type=int, default=4, help="the multi-process run")
        parser.add_argument("--e2e-tasks", type=int, default=200)
        parser.add_argument("--rss-steps", type=int, default=10_000)
        parser.add_argument("--dashboard-tasks", type=int, default=100_000)
        parser.add_argument("--dashboard-entries", type=int, default=1_000_000)
        parser.add_argument("--skip-e2e", action="store_true")
        parser.add_argument("--skip-dashboard", action="store_true")
        parser.add_argument(
            "--force", action="store_true", help="run even if the database holds real tasks"
        )
        # Internal: one measurement in a process of its own (for the multi-process figures).
        parser.add_argument("--part", choices=["journal", "dbos", "rss"], help="(internal)")
        parser.add_argument("--start-at", type=float, default=0.0, help="(internal)")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["part"]:
            self._part(options)
            return
        if not options["force"] and Task.objects.exclude(goal__startswith="bench:").exists():
            raise CommandError(
                "this database holds tasks that are not the benchmark's: run the benchmark "
                "against a throwaway database (`make bench` starts one), or pass --force"
            )
        out = self._measure(options)
        self._print(out, as_json=options["json"])

    # --- one part, in its own process ------------------------------------------------------------

    def _part(self, options: dict[str, Any]) -> None:
        wait = options["start_at"] - time.time()
        if wait > 0:
            time.sleep(wait)  # every process of a multi-process run starts together
        began = time.time()
        if options["part"] == "journal":
            result: dict[str, Any] = {
                "steps_per_s": runner.journal_steps_per_s(steps=options["steps"])
            }
        elif options["part"] == "dbos":
            result = {
                "steps_per_s": peer.dbos_steps_per_s(url=_owner_url(), steps=options["steps"])
            }
        else:
            start, end = runner.memory_over(steps=options["rss_steps"])
            result = {"start": start, "end": end}
        result.update(began=began, ended=time.time(), steps=options["steps"])
        self.stdout.write(json.dumps(result))

    def _spawn(self, part: str, options: dict[str, Any], count: int = 1) -> list[dict[str, Any]]:
        start_at = time.time() + 4.0  # after Django's start-up in each
        argv = [
            sys.executable,
            "manage.py",
            "bench",
            "--part",
            part,
            "--steps",
            str(options["steps"]),
            "--rss-steps",
            str(options["rss_steps"]),
            "--start-at",
            str(start_at),
        ]
        procs = [
            subprocess.Popen(  # noqa: S603 - this very command, in another process
                argv, cwd=REPO, env=dict(os.environ), stdout=subprocess.PIPE
            )
            for _ in range(count)
        ]
        results = []
        for proc in procs:
            stdout, _ = proc.communicate(timeout=1200)
            if proc.returncode != 0:
                raise CommandError(f"the {part} part failed (exit {proc.returncode})")
            results.append(json.loads(stdout.decode().strip().splitlines()[-1]))
        return results

    # --- everything -----------------------------------------------------------------------------

    def _measure(self, options: dict[str, Any]) -> dict[str, Any]:
        steps = options["steps"]
        owner = _owner_url()
        have_dbos = peer.dbos_available()
        rows: dict[str, list[float]] = {"raw": [], "journal": [], "journal_n": [], "dbos": []}
        runner.run_tasks(tasks=2, per_task=10)  # warm the in-process path once
        for round_ in range(options["repeat"]):
            self._say(f"round {round_ + 1} of {options['repeat']}")
            rows["raw"].append(raw.raw_steps_per_s(url=owner, steps=steps))
            rows["journal"].append(runner.journal_steps_per_s(steps=steps))
            parts = self._spawn("journal", options, count=options["processes"])
            span = max(p["ended"] for p in parts) - min(p["began"] for p in parts)
            rows["journal_n"].append(sum(p["steps"] for p in parts) / span)
            if have_dbos:
                rows["dbos"].append(self._spawn("dbos", options)[0]["steps_per_s"])
            self._say(
                ", ".join(
                    f"{name} {values[-1]:.0f} steps/s" for name, values in rows.items() if values
                )
            )
        raw.raw_cleanup(url=owner)
        out: dict[str, Any] = {
            "steps_per_measurement": steps,
            "raw_steps_per_s": summary(rows["raw"]),
            "journal_steps_per_s": {
                "1_process": summary(rows["journal"]),
                f"{options['processes']}_processes": summary(rows["journal_n"]),
            },
        }
        out["ratio_to_raw"] = round(
            out["journal_steps_per_s"]["1_process"]["median"] / out["raw_steps_per_s"]["median"],
            2,
        )
        if have_dbos:
            out["dbos_steps_per_s"] = summary(rows["dbos"])
            out["ratio_to_dbos"] = round(
                out["journal_steps_per_s"]["1_process"]["median"]
                / out["dbos_steps_per_s"]["median"],
                2,
            )
        else:
            out["dbos_steps_per_s"] = None
            out["ratio_to_dbos"] = None
            self._say("DBOS is not installed: pip install -e '.[bench]' to measure the peer")
        self._say("the cost of one step")
        cost = runner.step_cost(steps=200)
        out["statements_per_step"] = {"step_2": cost.statements[1], "step_200": cost.statements[-1]}
        out["round_trips_per_step"] = out["statements_per_step"]
        out["wal_bytes_per_step"] = cost.wal_bytes_per_step
        self._say(f"a worker's memory over {options['rss_steps']} steps")
        rss = self._spawn("rss", options)[0]
        out["worker_rss_mb"] = {"start": rss["start"], "end": rss["end"]}
        if not options["skip_e2e"]:
            out["e2e_tasks_per_s"] = {}
            with e2e.sandboxes() as providers:
                for workers in (1, 2):
                    self._say(f"renewals end to end on {workers} worker(s)")
                    rate = e2e.e2e_tasks_per_s(
                        workers=workers, tasks=options["e2e_tasks"], providers=providers
                    )
                    out["e2e_tasks_per_s"][f"{workers}_workers"] = round(rate, 1)
                    self._say(f"{rate:.1f} tasks/s")
        if not options["skip_dashboard"]:
            self._say(
                f"seeding {options['dashboard_tasks']:,} tasks and "
                f"{options['dashboard_entries']:,} entries"
            )
            dashboard.seed(tasks=options["dashboard_tasks"], entries=options["dashboard_entries"])
            long_task = dashboard.long_task(steps=200)
            out["dashboard_ms"] = {
                "task_list": dashboard.render_ms(path="/"),
                "task_200_steps": dashboard.render_ms(path=f"/tasks/{long_task}"),
            }
        return out

    def _say(self, message: str) -> None:
        self.stderr.write(f"bench | {message}")

    def _print(self, out: dict[str, Any], *, as_json: bool) -> None:
        lines = [
            f"raw psycopg, two commits per step:  {out['raw_steps_per_s']['median']:>8} steps/s",
            f"journal runner, 1 process:          "
            f"{out['journal_steps_per_s']['1_process']['median']:>8} steps/s "
            f"({out['ratio_to_raw']}x raw)",
        ]
        for name, figures in out["journal_steps_per_s"].items():
            if name != "1_process":
                label = f"journal runner, {name.replace('_', ' ')}:"
                lines.append(f"{label:<36}{figures['median']:>8} steps/s")
        if out["dbos_steps_per_s"]:
            lines.append(
                f"DBOS Transact, sequential:          {out['dbos_steps_per_s']['median']:>8} "
                f"steps/s (journal: {out['ratio_to_dbos']}x DBOS)"
            )
        lines.append(
            f"per step: {out['statements_per_step']['step_2']} statements at step 2, "
            f"{out['statements_per_step']['step_200']} at step 200; "
            f"{out['wal_bytes_per_step']} WAL bytes"
        )
        lines.append(
            f"worker RSS: {out['worker_rss_mb']['start']} MB → {out['worker_rss_mb']['end']} MB"
        )
        for name, rate in out.get("e2e_tasks_per_s", {}).items():
            workers = name.split("_")[0]
            lines.append(f"renewals end to end, {workers} RQ worker(s):   {rate:>8} tasks/s")
        for name, figures in out.get("dashboard_ms", {}).items():
            lines.append(
                f"page {name}: p50 {figures['p50']} ms, p95 {figures['p95']} ms, "
                f"{figures['queries']} queries"
            )
        for line in lines:
            self.stdout.write(line)
        if as_json:
            self.stdout.write(json.dumps(out, sort_keys=True))
