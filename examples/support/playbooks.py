"""How the scripted planner (``PLANNER=scripted``) decides a goodwill task: look the order up,
issue the credit, post the note, finish. It only ever goes forward: when a step of the saga
cannot happen — the order is not found, the credit is over the cap or already done, the
desk refuses the note — the harness, not the planner, ends the task and undoes what was done.
"""

from __future__ import annotations

from agentops.effects import Call, Decision, Finish, StepFact, StepState, TaskFacts


def _done(facts: TaskFacts, tool: str) -> StepFact | None:
    """The task's last done step of ``tool`` (the journal's facts, never the planner's memory)."""
    return next(
        (s for s in reversed(facts.steps) if s.tool == tool and s.state == StepState.DONE), None
    )


def _money(amount: int, currency: str) -> str:
    return f"{amount / 100:.2f} {currency.upper()}"


def goodwill(facts: TaskFacts) -> Decision:
    r = facts.refs
    order = _done(facts, "look_up_order")
    if order is None:
        return Call("look_up_order", {"order": r["order"]})
    credit = _done(facts, "issue_credit")
    if credit is None:
        return Call(
            "issue_credit",
            {
                "ticket": r["ticket"],
                "order": r["order"],
                "customer": r["email"],
                "amount": r["amount"],
                "currency": r["currency"],
            },
        )
    given = f"{_money(r['amount'], r['currency'])} credit {credit.evidence['id']}"
    if _done(facts, "post_note") is None:
        total = _money(order.evidence["total"], order.evidence["currency"])
        text = f"Goodwill: {given} to {r['email']} for order {r['order']} ({total})."
        return Call("post_note", {"ticket": r["ticket"], "text": text})
    return Finish(f"{r['ticket']}: {given} issued, and the team told")
