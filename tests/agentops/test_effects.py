"""The extension API (agentops.effects): what an app declares is found, and each misdeclared
tool or kind is refused at start-up with its sentence (issue 17)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import timedelta
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


class NoDescription(Fine):
    name = "no_description"
    description = ""


class NotAnObjectSchema(Fine):
    name = "not_an_object_schema"
    schema = {"type": "array", "items": {"type": "integer"}}


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
        (NoDescription(), "agentops.E101", "tool no_description: no description"),
        (
            NotAnObjectSchema(),
            "agentops.E102",
            "tool not_an_object_schema: its schema is not a JSON object schema",
        ),
        (NoLookup(), "agentops.E103", "cannot look its effects up"),
        (NoEvidence(), "agentops.E104", "names no evidence"),
        (ShortKey(), "agentops.E105", "could reach the provider after the key died"),
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


def test_a_saga_step_nobody_declared_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    odd = Registry()
    odd.kinds["books"] = effects.Kind(
        name="books",
        description="",
        refs_schema=effects.refs_object({}, []),
        binds={"fine": ()},
        saga=effects.Saga(steps=("fine", "ghost")),
    )
    monkeypatch.setattr("agentops.effects._checks.registry", odd)
    with override_settings(PLANNER="anthropic"):
        found = {str(p.id): p.msg for p in kind_problems({"fine": Fine()})}
    assert found["agentops.E113"] == "kind books: saga step ghost is unknown"


@pytest.mark.parametrize(
    ("closing", "binds", "sentence"),
    [
        ("ghost", {"fine": ()}, "its closing call's tool ghost is not one of its declared"),
        ("fine", {}, "its closing call's tool fine is not one of its declared tools"),
        ("fine", {"fine": ()}, "its closing call's tool fine is not irreversible"),
    ],
)
def test_a_closing_call_that_is_not_a_declared_irreversible_tool_is_refused(
    monkeypatch: pytest.MonkeyPatch, closing: str, binds: dict[str, Any], sentence: str
) -> None:
    odd = Registry()
    odd.kinds["closes"] = effects.Kind(
        name="closes",
        description="",
        refs_schema=effects.refs_object({}, []),
        binds=binds,
        closing=effects.Closing(closing, lambda refs, facts: None),
    )
    monkeypatch.setattr("agentops.effects._checks.registry", odd)
    with override_settings(PLANNER="anthropic"):
        found = {str(p.id): p.msg for p in kind_problems({"fine": Fine()})}
    assert sentence in found["agentops.E119"]


def test_an_irreversible_closing_call_is_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    odd = Registry()
    odd.kinds["closes"] = effects.Kind(
        name="closes",
        description="",
        refs_schema=effects.refs_object({}, []),
        binds={"told": ()},
        closing=effects.Closing("told", lambda refs, facts: None),
    )
    monkeypatch.setattr("agentops.effects._checks.registry", odd)
    told = type("Told", (Fine,), {"name": "told", "irreversible": True})()
    with override_settings(PLANNER="anthropic"):
        assert kind_problems({"told": told}) == []


def test_tools_that_cannot_be_made_are_refused_with_why(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> effects.Tool:
        raise RuntimeError("PAYMENTS_BASE is not a URL")

    broken.name = "broken"  # type: ignore[attr-defined]
    odd = Registry()
    odd.tools["broken"] = broken
    monkeypatch.setattr("agentops.effects._checks.registry", odd)
    monkeypatch.setattr("agentops.effects._registry.registry", odd)
    [refused] = effects.declarations()
    assert refused.id == "agentops.E116"
    assert refused.msg == "tool broken cannot be made: RuntimeError: PAYMENTS_BASE is not a URL"


class GiftCards(effects.HttpTool):
    """A tool of an app of one's own, whose settings are declared with it."""

    name = "giftcard_issue"
    description = "Issue a gift card."
    schema = {"type": "object", "properties": {"order": {"type": "string"}}}
    base_setting = "GIFTCARD_API_BASE"
    key_lifetime_setting = "GIFTCARD_KEY_LIFETIME_SECONDS"
    path = "/v1/cards"
    key_field = "reference"
    lookup_path = "/v1/cards"
    evidence = ("id",)


def own_app(monkeypatch: pytest.MonkeyPatch) -> None:
    odd = Registry()
    odd.tools["giftcard_issue"] = GiftCards
    monkeypatch.setattr("agentops.effects._checks.registry", odd)
    monkeypatch.setattr("agentops.effects._registry.registry", odd)


def test_a_tools_missing_setting_is_a_check_error_that_names_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Not an AttributeError from deep inside: an error of the check framework that says
    which setting, of which tool, and where it may be set; the other tools are still checked."""
    own_app(monkeypatch)
    monkeypatch.delenv("GIFTCARD_KEY_LIFETIME_SECONDS", raising=False)
    monkeypatch.setenv("GIFTCARD_API_BASE", "http://127.0.0.1:9")
    [refused] = effects.declarations()
    assert refused.id == "agentops.E118"
    assert refused.msg == (
        "tool giftcard_issue: the setting GIFTCARD_KEY_LIFETIME_SECONDS is not set: set it in "
        "your Django settings or as an environment variable of that name"
    )
    assert "GIFTCARD_KEY_LIFETIME_SECONDS=" in str(refused.hint)
    monkeypatch.setenv("GIFTCARD_KEY_LIFETIME_SECONDS", "a day")
    [refused] = effects.declarations()
    assert "GIFTCARD_KEY_LIFETIME_SECONDS is 'a day', not a number of seconds" in refused.msg
    with pytest.raises(effects.SettingMissing, match="GIFTCARD_KEY_LIFETIME_SECONDS"):
        GiftCards()


def test_a_tools_settings_are_read_from_the_environment_as_well(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An app's tool is configured without a settings module: the environment names its
    provider and how long that provider keeps keys; Django's settings win where both do."""
    own_app(monkeypatch)
    monkeypatch.setenv("GIFTCARD_API_BASE", "http://127.0.0.1:9/")
    monkeypatch.setenv("GIFTCARD_KEY_LIFETIME_SECONDS", "86400")
    tool = GiftCards()
    assert tool.key_lifetime == timedelta(days=1)
    assert tool.url(tool.path, {}) == "http://127.0.0.1:9/v1/cards"
    assert effects.declarations() == []
    with override_settings(GIFTCARD_API_BASE="http://127.0.0.1:10"):
        assert GiftCards().url("/v1/cards", {}) == "http://127.0.0.1:10/v1/cards"
    monkeypatch.delenv("GIFTCARD_API_BASE")
    [unset] = effects.declarations()
    assert unset.id == "agentops.W117" and "GIFTCARD_API_BASE is not set" in unset.msg


# --- Key lifetimes: a key outlives every request that may carry it --------------------------


def keyed(seconds: float, *, cost: effects.CostClass = effects.CostClass.FULL) -> effects.Tool:
    made: effects.Tool = type("Keyed", (Fine,), {"name": "keyed", "cost": cost})()
    made.key_lifetime = timedelta(seconds=seconds)
    return made


@override_settings(TOOL_TIMEOUT_SECONDS=5.0)
def test_a_key_that_may_die_under_a_retry_late_in_its_life_is_refused() -> None:
    """A retry with the same key may begin until the journal stops trusting the key (90 % of
    its life after the step was recorded: rounds run late under load), and sends for one
    whole call. A 30 s key outlives one 5 s call, but not a retry begun at 26.9 s."""
    found = ids(keyed(30))
    assert "agentops.E105" in found, found
    said = found["agentops.E105"]
    assert "its provider keeps keys 30 s" in said
    assert "a retry with the same key may begin up to 27 s after the step is recorded" in said
    assert "go on sending for one call, 5 s (1 request(s) of up to 5 s)" in said
    assert "its last request could reach the provider after the key died" in said
    assert "agentops.E105" not in ids(keyed(60))  # 54 s + 5 s < 60 s


@override_settings(TOOL_TIMEOUT_SECONDS=5.0)
def test_a_key_lifetime_counts_the_librarys_own_retries() -> None:
    class Retried(Fine):
        name = "retried"

        @property
        def requests_per_call(self) -> int:
            return 3  # the provider's library sends a request up to three times

    tool = Retried()
    tool.key_lifetime = timedelta(seconds=100)
    found = ids(tool)
    assert "for one call, 15 s (3 request(s) of up to 5 s)" in found["agentops.E105"]
    tool.key_lifetime = timedelta(seconds=200)  # 180 s + 15 s < 200 s
    assert "agentops.E105" not in ids(tool)


@override_settings(TOOL_TIMEOUT_SECONDS=5.0, RECONCILE_SCHEDULE=(1, 2, 5, 15, 30, 60, 120))
def test_a_key_the_reconciliation_rounds_outlast_is_warned_of() -> None:
    """The last round of the schedule, on time, retries 303 s after the step is recorded: the
    first call (5 s), every wait (233 s), six earlier rounds' lookup and retry (60 s), its own
    lookup (5 s). A key trusted 270 s cannot serve it. Before, only the first wait (1 s) was
    compared, and this passed."""
    found = ids(keyed(300))
    assert "agentops.E105" not in found  # a retry within its life is safe: 270 + 5 < 300
    said = found["agentops.W105"]
    assert "its provider keeps keys 300 s, and the journal trusts them 270 s" in said
    assert "would retry 303 s after the step is recorded" in said
    assert "only looked up, then given to a person, never sent again with its key" in said
    assert "agentops.W105" not in ids(keyed(340))  # trusted 306 s: past 303 s
    # A cheap effect is never looked up: its rounds are only retries (268 s).
    assert "agentops.W105" not in ids(keyed(300, cost=effects.CostClass.CHEAP))
    # Transient retries are new steps with new keys: they do not count.
    with override_settings(TRANSIENT_RETRY_SCHEDULE=(600,)):
        assert "agentops.W105" not in ids(keyed(340))


# --- Intents (served over MCP): their kind, effect, reads and words -------------------------


class Reads(Fine):
    name = "reads"
    cost = effects.CostClass.READ


def a_intent(**change: Any) -> effects.Intent:
    made = effects.Intent(
        name="do_fine",
        description="Do the fine thing for an order.",
        schema={"type": "object", "properties": {"order": {"type": "string"}}},
        kind="spends",
        effect="fine",
        identity=lambda args: f"fine:{args['order']}",
        refs=lambda args, records: {"order": args["order"]},
        goal=lambda args: f"the fine thing for {args['order']}",
        noun="fine thing",
        subject=lambda args: f"order {args['order']}",
        reads=("reads",),
    )
    return replace(made, **change)


@pytest.mark.parametrize(
    ("change", "check", "sentence"),
    [
        ({"kind": "nowhere"}, "agentops.E201", "intent do_fine: kind 'nowhere' is not declared"),
        (
            {"effect": "reads"},
            "agentops.E202",
            "intent do_fine: kind spends does not use 'reads'",
        ),
        ({"effect": "ghost"}, "agentops.E203", "intent do_fine: effect 'ghost' is unknown"),
        (
            {"reads": ("fine",)},
            "agentops.E204",
            "intent do_fine: 'fine' is not a declared READ tool",
        ),
        (
            {"reads": ("nobody",)},
            "agentops.E204",
            "intent do_fine: 'nobody' is not a declared READ tool",
        ),
        (
            {"schema": {"type": "string"}},
            "agentops.E205",
            "intent do_fine: its schema is not a JSON object schema",
        ),
        ({"noun": ""}, "agentops.E206", "intent do_fine: say what it does (description, noun)"),
        (
            {"description": ""},
            "agentops.E206",
            "intent do_fine: say what it does (description, noun)",
        ),
    ],
)
def test_a_misdeclared_intent_is_refused_with_its_sentence(
    monkeypatch: pytest.MonkeyPatch, change: dict[str, Any], check: str, sentence: str
) -> None:
    odd = Registry()
    odd.kinds["spends"] = effects.Kind(
        name="spends",
        description="",
        refs_schema=effects.refs_object({}, []),
        binds={"fine": ()},
    )
    monkeypatch.setattr("agentops.effects._intent.registry", odd)
    monkeypatch.setattr(
        "agentops.effects._intent.tools_made", lambda: {"fine": Fine(), "reads": Reads()}
    )
    monkeypatch.setattr("agentops.effects._intent._intents", {"do_fine": a_intent()})
    assert effects.intent_checks() == []  # declared as it should be
    monkeypatch.setattr("agentops.effects._intent._intents", {"do_fine": a_intent(**change)})
    found = {str(p.id): p.msg for p in effects.intent_checks()}
    assert found.get(check) == sentence, found


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
