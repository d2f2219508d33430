"""``manage.py journal_retain``: the journal's retention, by hand (docs/operating/retention.md).

Makes the partitions ahead, then drops every range whose tasks are all over and untouched for
the keep (JOURNAL_RETAIN_SECONDS), archiving each first with ``--archive DIR``; with
``--dry-run`` it only says which ranges would go and why the others stay.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from agentops.retention import journal_retain, report_lines
from journal.retention import partition_expired, partitions_due


class Command(BaseCommand):
    help = "Drop the journal's ranges that are over and past the keep (archiving them first)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--archive", type=Path, help="write each range here before it goes (.jsonl.gz)"
        )
        parser.add_argument("--dry-run", action="store_true", help="say what would go; drop none")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["dry_run"]:
            due = partitions_due()
            if not due:
                self.stdout.write("no range is past the keep")
            for partition in due:
                tasks, reason = partition_expired(partition.name)
                verdict = "would be dropped" if reason is None else f"stays: {reason}"
                self.stdout.write(f"{partition.name} ({tasks} task(s)) {verdict}")
            return
        for line in report_lines(journal_retain(archive_dir=options["archive"])):
            self.stdout.write(line)
