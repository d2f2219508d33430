"""When a chaos run passes, and how its figures read (``manage.py chaos``).

A run passes only when every figure of :data:`MUST_BE_ZERO` is zero — nothing happened twice
(per key or per business object, whatever the cause), nothing was lost, no step is left
unknown, nobody is asked to step in, every compensation balances, no passing failure was
dropped, every summary is true, the journal agrees with the ledgers, every answer the mcp
harness's agent was given is borne out (``untrue_answers``; None for the other harnesses,
which answer no agent), every customer whose trip was rejected or whose task's effects were
undone was told so by one closing message in the mail provider's ledger, not none
(``customers_not_told``), not two (``customers_told_twice``), and no customer was sent one
whose task was not compensated (``customers_told_wrongly``), and on a Patroni cluster
(``--cluster``) no step the primary showed committed before a failover, switchover or
partition is missing or settled otherwise after it (``committed_lost``; None without a
cluster) — and the tasks the plan
hands to a person on purpose (``--refuse-us N``: the provider refuses *us* for N charges,
which only a person can put right) are exactly the ones that need a person. A run whose
faults are all recoverable by design (the default) must therefore end with nobody asked.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

MUST_BE_ZERO = (
    "duplicates",
    "business_duplicates",
    "lost",
    "unknown_open",
    "needs_human",
    "compensation_mismatch",
    "dropped_intents",
    "untrue_summaries",
    "journal_mismatch",
    "untrue_answers",
    "customers_not_told",
    "customers_told_twice",
    "customers_told_wrongly",
)
CLUSTER_MUST_BE_ZERO = ("committed_lost",)
"""Figures only a run on a Patroni cluster has (``--cluster``; None for any other run), and
that must be zero there too."""


def verdict(figures: Mapping[str, Any]) -> list[str]:
    """Why the run fails, one sentence per reason; empty when it passes."""
    reasons = []
    examples = figures.get("examples") or {}
    for name in (*MUST_BE_ZERO, *CLUSTER_MUST_BE_ZERO):
        value = figures.get(name)
        if not value:
            continue  # zero, or a figure the harness has no means to tell (None)
        reason = f"{name} is {value}, not 0"
        if name == "needs_human":
            reason += ": tasks need a person that the plan did not hand over on purpose"
            wrong = [f for f in figures.get("flagged") or [] if not f.get("on_purpose")]
            if wrong:
                first = wrong[0]
                reason += f", e.g. {first['task']} [{first['code']}] {first['reason'][:200]}"
        elif examples.get(name):
            reason += f", e.g. {examples[name][0]}"
        reasons.append(reason)
    found = figures.get("needs_human_on_purpose", 0)
    expected = figures.get("needs_human_expected", 0)
    if found != expected:
        reasons.append(
            f"needs_human_on_purpose is {found}: the plan refuses us for {expected} charge(s), "
            f"and each such task, and only it, must be left to a person"
        )
    return reasons


def report_lines(figures: Mapping[str, Any]) -> Sequence[str]:
    """The figures for a person to read (``--json`` prints them as one object instead)."""
    lines = [
        f"chaos run, seed {figures['seed']}, {figures['harness']} harness: "
        + ("PASS" if figures["ok"] else "FAIL"),
    ]
    lines += [f"  because {reason}" for reason in figures.get("failed") or []]
    lines.append(
        f"  tasks {figures['tasks']}, steps {figures['steps']}, intended effects "
        f"{figures['intended_effects']}, provider effects {figures['provider_effects']}"
    )
    for name in MUST_BE_ZERO:
        lines.append(f"  {name:<26} {figures.get(name)}")
        if name == "business_duplicates":
            causes = figures.get("business_duplicates_by_cause")
            lines.append(f"    by cause                 {causes}")
        if name == "customers_not_told":
            lines.append(f"    owed a closing message   {figures.get('customers_owed')}")
    for name in CLUSTER_MUST_BE_ZERO:
        if figures.get(name) is not None:
            lines.append(f"  {name:<26} {figures.get(name)}")
    lines.append(
        f"  needs_human_on_purpose     {figures.get('needs_human_on_purpose')} "
        f"(expected {figures.get('needs_human_expected')})"
    )
    for flagged in (figures.get("flagged") or [])[:10]:
        why = "on purpose" if flagged.get("on_purpose") else "NOT on purpose"
        lines.append(f"    {flagged['task']} [{flagged['code']}, {why}] {flagged['reason'][:120]}")
    if figures.get("mcp_answers") is not None:
        lines.append(
            f"  mcp calls                  {figures.get('mcp_calls')}: {figures['mcp_answers']}"
        )
    lines.append(f"  model slips                {figures.get('model_slips')}")
    lines.append(f"  approvals                  {figures.get('approvals')}")
    lines.append(f"  outcomes                   {figures['outcomes']}")
    lines.append(f"  faults injected            {figures['faults_injected']}")
    if figures.get("faults_skipped"):
        lines.append(f"  faults skipped             {figures['faults_skipped']}")
    lines.append("  recovery (s)               kind: n, p50, max, never")
    for kind, r in figures["recovery_s"].items():
        lines.append(f"    {kind:<24} {r['n']:>4} {r['p50']!s:>6} {r['max']!s:>6} {r['never']:>4}")
    for name, examples in (figures.get("examples") or {}).items():
        lines.append(f"  {name}, for example:")
        lines += [f"    {e}" for e in examples]
    lines.append(f"  wall {figures['wall_s']} s; logs in {figures['workdir']}")
    return lines
