"""Formerly: triggers on the journal's tables (a settled step frozen whole; a task's kind, goal
and references frozen). They belong to the journal and are made by its own migrations now,
from journal/sql/journal_step_settled_frozen.001.sql and journal_task_facts_frozen.001.sql
(journal migration 0010): each app's migrations touch only its own tables. A database that
applied the old version of this migration holds the same triggers, replaced by 0010."""

from __future__ import annotations

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("agentops", "0002_webhook_facts"),
        ("journal", "0004_task_state_machine"),
    ]
    operations = []
