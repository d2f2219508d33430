"""The chaos run's verdict: what the harness says happened, against what the providers did.

The providers' ledgers are the ground truth (devtools.chaos.ledgers). From them alone:

- **duplicates**: an intended action (a step's key, a compensation's key; for the naive
  harness, its action ``naive:<task>:<n>``) that took effect more than once — always one
  task's own doing (a retry after a fault, its model calling again);
- **business duplicates**: a second standing charge for one invoice, a second receipt,
  itinerary or reminder N of one reference, a second standing flight hold for one passenger
  and flight, or hotel booking for one guest, hotel and night, with its cause: one task's
  faults, two tasks asked for the same thing on purpose, or a task acting on another's
  object (``business_duplicates_by_cause``).

Against the journal (or the naive loop's own record):

- **lost**: a task with no final state and no flag for a human;
- **unknown_open**: steps still unknown (or in flight) at the end;
- **needs_human**: tasks left needing a person that the plan did not hand over on purpose
  (``needs_human_on_purpose``: those it did, by refusing us; ``flagged``: each, with its
  code and sentence);
- **compensation_mismatch**: an effect of a saga neither standing (the saga finished) nor
  offset exactly once (it was compensated), by the providers' account;
- **dropped_intents**: an effect a task meant to make that ended not done for a passing
  reason and was never tried again;
- **untrue_summaries**: a task whose summary — as it was told — disagrees with the ledgers
  (devtools.chaos.truth, the same check for both harnesses);
- **journal_mismatch**: a step the journal calls done with no effect, or not done with one.

The customers told (devtools.chaos.truth.customers_told), by the mail provider's ledger:

- **customers_not_told**: a customer owed a closing message — a trip the plan rejected, or a
  task that ended compensated whose kind declares a closing call with something to say —
  that got none;
- **customers_told_twice**: a customer sent two closing messages or more;
- **customers_told_wrongly**: a closing message under the keys of a task that was not
  compensated, to a customer nothing was undone for, or to one whose saga (a trip asked
  for twice) finished and stands.

Recovery (``recovery_s``): for each fault kind, how long from the fault hitting a task to the
task moving again — for a provider fault, the step it hit settling (done, or not done for
good); for a process fault, the first thing a runner writes for the task after it (counted
from when the task was due, if it was waiting); ``never`` when that did not happen.

By concern:

- ``base``: what every audit shares: the process faults that hit tasks (:class:`Hit`), the
  recovery samples and their summary, how many examples a figure keeps;
- ``safe``: the safe harness, the journal against the ledgers (:func:`audit_journal`);
- ``recovery``: how long the journal's tasks took to move again after each fault;
- ``naive``: the naive harness, its own record against the ledgers (:func:`audit_naive`);
- ``answers``: every answer the mcp harness's agent was given, against the ledgers
  (:func:`answers_untrue`);
- ``mcp``: the mcp harness, its intents' tasks and its conversations (:func:`audit_mcp`);
- ``duplicates``: business duplicates and their causes, for every harness.
"""

from devtools.chaos.audit.answers import answers_untrue
from devtools.chaos.audit.base import Hit
from devtools.chaos.audit.duplicates import duplicates_figures
from devtools.chaos.audit.mcp import audit_mcp
from devtools.chaos.audit.naive import audit_naive
from devtools.chaos.audit.safe import audit_journal

__all__ = [
    "Hit",
    "answers_untrue",
    "audit_journal",
    "audit_mcp",
    "audit_naive",
    "duplicates_figures",
]
