"""The provider audit's page is searched by a key, an effect's id or a task's id; a finding no
step made has no task, only a key, and is found by its task's id through the key format's
one function (journal/sql/journal_step_key), not a copy of the format in Python."""

from __future__ import annotations

import uuid

import pytest
from django.utils import timezone

from agentops.audit.models import AuditRun, AuditTrigger, Finding, FindingKind
from agentops.audit.selectors import finding_list
from journal.record import task_create
from tests.journal.support import invoice

pytestmark = pytest.mark.usefixtures("committed")


def _finding(run: AuditRun, key: str, **fields: object) -> Finding:
    return Finding.objects.create(
        provider="search-test",
        kind=FindingKind.NO_STEP,
        effect_id=f"pi_{uuid.uuid4().hex}",
        key=key,
        run=run,
        summary="a charge carrying our key that no step made",
        **fields,
    )


def test_a_task_id_finds_the_findings_keyed_by_its_steps_and_only_those() -> None:
    task = task_create(kind="renewal", goal="renew", refs={"invoice": invoice()})
    other = task_create(kind="renewal", goal="renew", refs={"invoice": invoice()})
    now = timezone.now()
    run = AuditRun.objects.create(
        provider="search-test", trigger=AuditTrigger.COMMAND, since=now, until=now
    )
    no_step = _finding(run, f"ao:{task.pk}:7")  # no step 7: only the key names the task
    undo = _finding(run, f"ao:{task.pk}:2:undo")
    its_own = _finding(run, "", task=task)
    _finding(run, f"ao:{other.pk}:7")
    _finding(run, f"ao:{task.pk}")  # not one of its steps' keys

    for q in (str(task.pk), str(task.pk).upper(), task.pk.hex):
        found = {f.pk for f in finding_list(state="all", q=q).page}
        assert found == {no_step.pk, undo.pk, its_own.pk}, q
    assert [f.pk for f in finding_list(state="all", q=no_step.key).page] == [no_step.pk]
    assert [f.pk for f in finding_list(state="all", q=undo.effect_id).page] == [undo.pk]
