"""Who may make which move: the journal's functions by the kind of process that calls them
(docs/design.md §4, "A role for each kind of process").

No app role writes a journal table; each may only execute the functions listed for its kind
here (agentops/dbroles.py grants exactly these, and tests/agentops/test_database_roles.py
reads the grants back from PostgreSQL's catalogue and compares them with this list). A
function of the journal that is listed for no kind is a part of the moves, called only from
inside them, as the tables' owner: the state machine (``journal_transition``), the lease
check (``journal_hold``), settling (``journal_step_settle``), writing an entry.

- :data:`RUNNER`: the workers and the sweeper. They take leases, record, attempt, settle and
  finish, move their tasks along, apply what providers report, and keep the journal's
  ranges. They can make the journal say that something happened: the provider audit
  checks that what it says is so (docs/design.md §15).
- :data:`PEOPLE`: what faces the network (the web pages, the HTTP API, the MCP server).
  They start tasks, read, and record the decisions of people and programs (resume, cancel,
  approve, reject, compensate, have a step looked up now, settle by hand or correct a step
  that needs a person, leave a note), each checked by its function as a person's would be.
  They cannot take a lease, record an effect or settle one: a person's decision about what
  happened to a step is recorded here and applied by a worker (``journal_decision_apply``),
  which asks again whether it still may.
"""

from __future__ import annotations

RUNNER = "runner"
PEOPLE = "people"
KINDS = (RUNNER, PEOPLE)

# Reads any kind may call: they change nothing.
_READS = (
    "journal_partition_expired",
    "journal_partition_dropped",
    "journal_retention_before",
    "journal_uuid_at",
    "journal_step_key",
)

MOVES: dict[str, frozenset[str]] = {
    # The runner's moves, under a task's lease (journal_hold checks it first).
    "journal_lease_take": frozenset({RUNNER}),
    "journal_lease_renew": frozenset({RUNNER}),
    "journal_lease_release": frozenset({RUNNER}),
    "journal_record": frozenset({RUNNER}),
    "journal_attempt_start": frozenset({RUNNER}),
    "journal_mark_unknown": frozenset({RUNNER}),
    "journal_finish": frozenset({RUNNER}),
    "journal_task_wait": frozenset({RUNNER}),
    "journal_task_wake": frozenset({RUNNER}),
    "journal_task_flag": frozenset({RUNNER}),
    "journal_task_await": frozenset({RUNNER}),
    "journal_approval_request": frozenset({RUNNER}),
    "journal_approval_expire": frozenset({RUNNER}),
    "journal_approval_spend": frozenset({RUNNER}),
    "journal_saga_unwind": frozenset({RUNNER}),
    "journal_effect_checked": frozenset({RUNNER}),
    # Tasks waiting on a step that settled, woken at once (a person resolved its task).
    "journal_waiters_wake": frozenset({RUNNER}),
    # What providers report, with or without a lease: the runner's attempt and lookups, a
    # notification applied, an audit's finding.
    "journal_settle": frozenset({RUNNER}),
    "journal_step_conflict": frozenset({RUNNER}),
    "journal_step_noted": frozenset({RUNNER}),
    "journal_step_audited": frozenset({RUNNER}),
    # A person's decision about a step, recorded by what faces the network, applied here.
    "journal_decision_apply": frozenset({RUNNER}),
    # The journal's ranges (docs/design.md §17).
    "journal_partitions_ensure": frozenset({RUNNER}),
    "journal_partition_drop": frozenset({RUNNER}),
    # People's and programs' decisions.
    "journal_task_create": frozenset({PEOPLE}),
    "journal_task_resume": frozenset({PEOPLE}),
    "journal_task_cancel": frozenset({PEOPLE}),
    "journal_approval_approve": frozenset({PEOPLE}),
    "journal_approval_reject": frozenset({PEOPLE}),
    "journal_saga_compensate": frozenset({PEOPLE}),
    "journal_steps_reconcile_now": frozenset({PEOPLE}),
    "journal_step_resolve": frozenset({PEOPLE}),
    "journal_step_correct": frozenset({PEOPLE}),
    "journal_note": frozenset({PEOPLE}),
    # What the pages show beside a button a person may not press, and why.
    "journal_task_cancel_refusal": frozenset({PEOPLE}),
    "journal_saga_compensate_refusal": frozenset({PEOPLE}),
    "journal_step_correct_refusal": frozenset({PEOPLE}),
    **{name: frozenset(KINDS) for name in _READS},
}


def callable_by(kind: str) -> list[str]:
    """The journal's functions a process of ``kind`` may execute, by name."""
    return sorted(name for name, kinds in MOVES.items() if kind in kinds)
