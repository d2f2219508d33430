"""Notifications out (docs/operating/notifications.md): the agent builder's own endpoint
(``NOTIFY_URL``) is told, by a signed JSON POST, when a task needs a person, awaits approval,
finishes or is compensated (``NOTIFY_EVENTS``).

Each delivery is an effect of agentops itself, of the CHEAP class (docs/design.md §9): keyed,
retried with the same key while the key lives, never looked up, each answer classified in three
states by the journal's own ``classify`` (§2).

**Why not a journal step.** A finished task takes no new step: a step is born only in a
runnable task under a live lease (the journal's birth trigger), and the events worth telling
are exactly the ones that end a run. So a delivery is a row of its own (``Delivery``).

**Derived from the journal, not hooked onto it.** A hook called after the status change
commits is not atomic with it (a process killed in between loses the notification), and
writing the row in the same transaction would mean editing the journal's SQL, where every
status change happens (``journal_transition``). Instead the journal's own entries are the
outbox: every status change writes ``task_flagged``, ``approval_requested`` or
``task_finished`` in the transaction that makes it, and :func:`services.notifications_derive`
turns each such entry into a delivery, keyed ``ao:notify:<task>:<entry id>`` (unique: a
second derivation inserts nothing). It runs in the sweeper every ``SWEEP_INTERVAL_SECONDS``,
and after a worker's run that ended in such a status (a doorbell: losing it loses nothing).

**A watermark that misses nothing.** Entry ids are not in commit order: a transaction may
draw id 10, and commit after id 11 was derived. So the cursor moves past ids only once every
transaction that could still commit one of them has ended, by PostgreSQL's snapshots: each
derivation notes the highest id it saw (``seen_entry_id``) and the snapshot's ``xmax``; a
later one whose snapshot's ``xmin`` has reached that ``xmax`` knows every transaction then in
flight has ended, so everything up to ``seen_entry_id`` is visible to its own scan, and moves
the safe mark (``safe_entry_id``) there. Until then it scans again from the safe mark,
skipping entries that have their delivery already. (A status entry's id is drawn after its
transaction updated the task row, so that transaction already has its xid: see
``journal_transition``.) Derivations take the cursor's row lock (``SKIP LOCKED``): one at a
time, and none waits for another.

**Attempts.** A delivery's job claims it (``sending``, its next attempt pushed past the call's
longest wait), sends, and settles what ``classify`` said: a 2xx is ``done`` (the receiver's
status and id as evidence); a refusal is ``not_done`` — and a 401, 403, 404 or 421 is *ours*
(``misconfigured``: the secret or the address), not retried, shown and counted as such;
anything else is ``unknown`` and retried, same key, same body, on ``NOTIFY_RETRY_SCHEDULE``
while the key is trusted (90 % of ``NOTIFY_KEY_LIFETIME_SECONDS`` from the event), then given
up, still ``unknown``. A request that provably never left keeps the delivery ``queued``;
given up so, it is ``not_done``. A worker killed mid-call leaves it ``sending``: once the
claim lapses the sweeper rings it again, and that attempt counts the lost one as one that may
have arrived.
"""
