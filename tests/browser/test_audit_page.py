"""The provider audit's pages, readable (issue 38): money in major units with its currency,
times not epoch seconds, the two sides side by side with what differs marked, each kind in
words with its code beside, labelled filters; axe-core clean, light and dark, desktop and
phone."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from agentops.audit.models import AuditRun, Finding
from journal.record import task_create
from tests.browser.conftest import PHONE, accessibility_problems, log_in, operator, screenshot
from tests.journal.support import invoice

pytestmark = pytest.mark.usefixtures("committed")


def findings() -> tuple[Finding, Finding]:
    """A refund made in the provider's dashboard, and a charge of another amount."""
    now = timezone.now()
    run = AuditRun.objects.create(
        provider="stripe", trigger="schedule", since=now - timedelta(days=1), until=now
    )
    task = task_create(
        kind="renewal",
        goal="renew",
        refs={"invoice": invoice(), "amount": 12099, "currency": "eur", "email": "a@example.com"},
    )
    created = int((now - timedelta(hours=2)).timestamp())
    tag = uuid.uuid4().hex[:8]

    def sides(amount: int, offset: str) -> tuple[dict[str, Any], dict[str, Any]]:
        key = f"ao:{task.pk}:1"
        provider = {
            "provider_id": f"pi_{tag}",
            "key": key,
            "tool": "charge_customer",
            "amount": amount,
            "currency": "eur",
            "recipient": None,
            "offset": offset,
            "lapsed": False,
            "created": (now - timedelta(hours=2)).isoformat(),
            "raw": {"id": f"pi_{tag}", "amount": amount, "currency": "eur", "created": created},
        }
        journal = {
            "step": key,
            "tool": "charge_customer",
            "state": "done",
            "args": {"invoice": task.refs["invoice"], "amount": 12099, "currency": "eur"},
            "evidence": {"payment_intent": f"pi_{tag}", "charge": f"ch_{tag}"},
            "undone": False,
            "undoing": False,
            "settled_at": (now - timedelta(hours=2)).isoformat(),
        }
        return provider, journal

    provider, journal = sides(12099, "refunded 12099 eur")
    refunded = Finding.objects.create(
        provider="stripe",
        kind="offset_unknown",
        effect_id=f"pi_{tag}",
        key=journal["step"],
        task=task,
        run=run,
        summary=f"pi_{tag} (charge_customer, step {journal['step']}) was refunded 12099 eur at "
        "stripe, and the journal knows no undo of it",
        provider_side=provider,
        journal_side=journal,
    )
    provider, journal = sides(13000, "")
    other = Finding.objects.create(
        provider="stripe",
        kind="mismatch",
        effect_id=f"pi_{tag}",
        key=journal["step"],
        task=task,
        run=run,
        summary=f"pi_{tag} for step {journal['step']} differs: amount 12099 in the journal, "
        "13000 at stripe",
        provider_side=provider,
        journal_side=journal,
        differences={"amount": {"journal": 12099, "provider": 13000}},
    )
    return refunded, other


def test_the_audit_pages_read_as_people_read(app_server: str, page: Any) -> None:
    refunded, other = findings()
    log_in(page, app_server, operator("Operators (read-only)"))
    problems: dict[str, list[str]] = {}
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme)
        for size, viewport in (("desktop", {"width": 1280, "height": 900}), ("phone", PHONE)):
            page.set_viewport_size(viewport)
            page.goto(f"{app_server}/audit/?q={refunded.effect_id}")
            listed = page.inner_text("table.findings")
            assert "120.99 EUR" in listed and "12099 eur" not in listed
            assert "Undone at the provider" in listed and "offset_unknown" in listed
            for name in ("Kind", "Provider", "Step key"):
                label = page.locator("form.filters label", has_text=name).first
                assert label.is_visible() and label.locator("select, input").count() == 1, name
            found = accessibility_problems(page)
            if found:
                problems[f"list ({scheme}, {size})"] = found
            page.goto(f"{app_server}/audit/{refunded.pk}")
            shown = page.inner_text("#finding")
            assert "refunded 120.99 EUR at stripe" in shown and "12099 eur" not in shown
            assert "What it means:" in shown and "What to do:" in shown
            standing = page.inner_text("table.compared tr.differs")
            assert "Whether it stands" in standing and "differs" in standing
            assert "standing (no undo)" in standing and "refunded 120.99 EUR" in standing
            when = page.inner_text("table.compared tr:has(th:text('When (settled; made)'))")
            assert "UTC" in when or ":" in when
            found = accessibility_problems(page)
            if found:
                problems[f"finding ({scheme}, {size})"] = found
            if scheme == "light":
                screenshot(page, f"audit-finding-{size}")
            page.goto(f"{app_server}/audit/{other.pk}")
            differs = page.inner_text("table.compared tr.differs")
            assert "Amount" in differs and "120.99 EUR" in differs and "130.00 EUR" in differs
            found = accessibility_problems(page)
            if found:
                problems[f"mismatch ({scheme}, {size})"] = found
    assert problems == {}, problems
