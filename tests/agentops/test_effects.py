"""The extension API (agentops.effects): what an app declares is found, and each misdeclared
tool or kind is refused at start-up with its sentence (issue 17)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from django.core.checks import Error
from django.test import override_settings

from agentops import effects
from agentops.effects._checks import kind_problems, tool_problems
from agentops.effects._registry import Registry, registry


class Fine(effects.Tool):
    """A full effect declared as it should be."""

    name = "fine"
    description = "Do a fine thing."
    schema = {
        "type": "object",
        "properties": {"amount": {"type": "integer"}, "currency": {"type": "string"}},
    }
    evidence: tuple[str, ...] = ("id",)

    def lookup(self, args: Mapping[str, Any], *, key: str) -> effects.Outcome | None:
        return None


def ids(tool: effects.Tool, known: set[str] | None = None) -> dict[str, str]:
    found = tool_problems(tool, known or {tool.name})
    return {str(p.id): p.msg for p in found}


def test_the_shipped_kinds_are_found_the_django_way() -> None:
    """commerce is an installed app like any user's: its effects module was imported when
    Django started, and everything it declares is there."""
    assert {"renewal", "trip", "reminders"} <= set(effects.kinds())
    assert {"charge_customer", "send_email", "hold_flight"} <= set(effects.tools())
    assert {"renewal", "trip", "reminders"} <= set(registry.playbooks)
    assert {"payments", "mail", "bookings"} <= set(registry.sandboxes)
    assert ("pay/", "commerce.customers.urls") in registry.urls


def test_what_is_declared_passes_the_start_up_checks() -> None:
    problems = [p for p in effects.declarations() if isinstance(p, Error)]
    assert problems == []
    assert ids(Fine()) == {}


class NoLookup(Fine):
    name = "no_lookup"
    lookup = effects.Tool.lookup


class NoEvidence(Fine):
    name = "no_evidence"
    evidence = ()


class ShortKey(Fine):
    name = "short_key"
    key_lifetime = effects.Tool.key_lifetime / (24 * 3600)  # one second


class UndoWithoutArgs(Fine):
    name = "undo_without_args"
    compensation = "fine"


class UndoUnknown(Fine):
    name = "undo_unknown"
    compensation = "nobody"

    def undo_args(self, args: Mapping[str, Any], evidence: Mapping[str, Any]) -> dict[str, Any]:
        return {}


class UndoAndIrreversible(UndoUnknown):
    name = "undo_and_irreversible"
    compensation = "fine"
    irreversible = True


class ReadWithUndo(Fine):
    name = "read_with_undo"
    cost = effects.CostClass.READ
    irreversible = True


class MoneyNotInSchema(Fine):
    name = "money_not_in_schema"
    money = effects.Money(amount="total", currency="currency")


@pytest.mark.parametrize(
    ("tool", "check", "sentence"),
    [
        (NoLookup(), "agentops.E103", "cannot look its effects up"),
        (NoEvidence(), "agentops.E104", "names no evidence"),
        (ShortKey(), "agentops.E105", "the key could die before its own reply"),
        (UndoWithoutArgs(), "agentops.E108", "not how its evidence becomes the undo's"),
        (UndoUnknown(), "agentops.E107", "its undo 'nobody' is not a declared tool"),
        (UndoAndIrreversible(), "agentops.E109", "has an undo and says it is irreversible"),
        (ReadWithUndo(), "agentops.E106", "is a READ: it has nothing to undo"),
        (MoneyNotInSchema(), "agentops.E110", "money arguments ['total'] are not in its schema"),
    ],
)
def test_a_misdeclared_tool_is_refused_with_its_sentence(
    tool: effects.Tool, check: str, sentence: str
) -> None:
    found = ids(tool, {tool.name, "fine"})
    assert check in found, found
    assert sentence in found[check]


def test_a_misdeclared_kind_is_refused_with_its_sentence(monkeypatch: pytest.MonkeyPatch) -> None:
    odd = Registry()
    odd.kinds["spends"] = effects.Kind(
        name="spends",
        description="",
        refs_schema=effects.refs_object({}, []),
        binds={"fine": (), "ghost": ()},
        saga=effects.Saga(steps=("fine",)),
    )
    odd.tools["fine"] = Fine
    monkeypatch.setattr("agentops.effects._checks.registry", odd)
    fine_money = type("FineMoney", (Fine,), {"money": effects.Money()})()
    with override_settings(PLANNER="scripted"):
        found = {str(p.id): p.msg for p in kind_problems({"fine": fine_money})}
    assert "tools ['ghost'] are not declared" in found["agentops.E111"]
    assert "move money, and caps none" in found["agentops.E112"]
    assert "saga step fine has no undo and is not irreversible" in found["agentops.E114"]
    assert "has no playbook" in found["agentops.E115"]


def test_a_name_declared_twice_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    odd = Registry()
    monkeypatch.setattr("agentops.effects._registry.registry", odd)
    effects.register_tool(Fine)
    effects.register_tool(Fine)
    assert odd.problems == ["tool 'fine' is declared twice"]


def test_a_provider_with_no_address_is_never_sent_to_and_is_ours_to_fix() -> None:
    """An unset address (a setting left empty) is not "may have processed it": nothing could
    have left, and no retry will help until a person sets it."""
    import requests

    from journal.outcomes import classify

    seen = effects.observe_exception(requests.exceptions.MissingSchema("No scheme supplied"))
    assert isinstance(seen, effects.NotSent) and seen.error_class == "InvalidURL"
    outcome = classify(seen, earlier_attempt=False)
    assert outcome.state == "not_done" and outcome.data["misconfigured"] is True


def test_an_http_tool_whose_address_is_unset_is_warned_about_at_start_up() -> None:
    class Unset(effects.HttpTool):
        name = "unset"
        description = "Post somewhere."
        schema = {"type": "object", "properties": {}}
        base_setting = "SUPPORT_API_BASE"
        path = "/v1/things"
        key_field = "reference"
        lookup_path = "/v1/things"
        evidence = ("id",)

    with override_settings(SUPPORT_API_BASE=""):
        assert "agentops.W117" in ids(Unset())
    with override_settings(SUPPORT_API_BASE="http://127.0.0.1:9"):
        assert "agentops.W117" not in ids(Unset())
