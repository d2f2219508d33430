"""The extension API: what your Django app imports to give agentops its tools, its task kinds,
their playbooks and the stand-in providers to test them against (docs/design.md §15).

Put an ``effects.py`` in your app (it is found the way ``admin.py`` is) and declare::

    from agentops import effects

    @effects.register_tool
    class IssueRefund(effects.HttpTool):
        name = "issue_refund"
        ...

    effects.register_kind(effects.Kind(name="goodwill", ...))
    effects.register_intent(effects.Intent(name="refund_order", ...))  # served over MCP
    effects.register_audit(SupportDeskAudit)  # how the provider audit lists its effects
    effects.register_demo(effects.DemoTask(kind="goodwill", ...))  # what `make run` starts

Everything a tool or kind declares exists to prevent one failure; :class:`Tool` and
:class:`Kind` say which. ``manage.py check`` refuses a misdeclared tool or kind at start-up.
This module is the whole public surface: agentops' own shipped kinds (``commerce``) and the
example (``examples/support``) use nothing else.
"""

from __future__ import annotations

from agentops.effects._audit import Audit, ProviderEffect, audits, register_audit
from agentops.effects._checks import declarations
from agentops.effects._http import (
    Exchange,
    http_call,
    http_exchange,
    http_session,
    observe_exception,
)
from agentops.effects._http_tool import HttpTool
from agentops.effects._intent import (
    Intent,
    IntentRefused,
    RecordMissing,
    Records,
    RecordUnreadable,
    intent_checks,
    intent_get,
    intents,
    register_intent,
)
from agentops.effects._journal import (
    FINAL,
    GUARD_REFUSALS,
    LIVE_STATES,
    EntryKind,
    ProviderEvent,
    Refusal,
    Step,
    StepState,
    Task,
    UnsafeName,
    note,
    object_key,
    provider_event_observed,
    same_object,
    step_by_key,
    step_conflict,
    step_noted,
    step_settle,
    store_provider_event,
    task_note,
    task_ring,
    task_start,
)
from agentops.effects._kind import (
    Append,
    Bind,
    Check,
    Closing,
    Followup,
    Kind,
    KindRules,
    OneOf,
    Own,
    Ref,
    Row,
    Saga,
    TaskRefused,
    money_committed,
    plan_problems,
    refs_object,
    task_problems,
)
from agentops.effects._registry import (
    ActionRefused,
    DemoTask,
    Sandbox,
    TaskAction,
    TaskLink,
    UnknownKind,
    autodiscover,
    kind_get,
    kinds,
    register_action,
    register_demo,
    register_event_applier,
    register_kind,
    register_link,
    register_playbook,
    register_sandbox,
    register_tool,
    register_urls,
    registry,
    tools,
)
from agentops.effects._schema import FORMATS, NO_CONTROL, StrictValidator, schema_problems
from agentops.effects._tool import Money, SettingMissing, Tool, tool_setting
from journal.keys import is_our_key
from journal.outcomes import Interrupted, NotSent, Observation, Outcome, Reply
from journal.protocols import Call, CostClass, Decision, Finish, StepFact, TaskFacts

__all__ = [
    "ActionRefused",
    "Append",
    "Closing",
    "Followup",
    "Audit",
    "Bind",
    "Call",
    "Check",
    "CostClass",
    "Decision",
    "DemoTask",
    "EntryKind",
    "Exchange",
    "FINAL",
    "FORMATS",
    "Finish",
    "GUARD_REFUSALS",
    "HttpTool",
    "Intent",
    "IntentRefused",
    "Interrupted",
    "Kind",
    "KindRules",
    "LIVE_STATES",
    "Money",
    "NO_CONTROL",
    "NotSent",
    "Observation",
    "OneOf",
    "Outcome",
    "Own",
    "ProviderEffect",
    "ProviderEvent",
    "RecordMissing",
    "RecordUnreadable",
    "Records",
    "Ref",
    "Refusal",
    "Reply",
    "Row",
    "Saga",
    "Sandbox",
    "SettingMissing",
    "Step",
    "StepFact",
    "StepState",
    "StrictValidator",
    "Task",
    "TaskAction",
    "TaskFacts",
    "TaskLink",
    "TaskRefused",
    "Tool",
    "UnknownKind",
    "UnsafeName",
    "audits",
    "autodiscover",
    "declarations",
    "http_call",
    "http_exchange",
    "http_session",
    "intent_checks",
    "intent_get",
    "intents",
    "is_our_key",
    "kind_get",
    "kinds",
    "money_committed",
    "note",
    "object_key",
    "observe_exception",
    "plan_problems",
    "provider_event_observed",
    "refs_object",
    "register_action",
    "register_audit",
    "register_demo",
    "register_event_applier",
    "register_intent",
    "register_kind",
    "register_link",
    "register_playbook",
    "register_sandbox",
    "register_tool",
    "register_urls",
    "registry",
    "same_object",
    "schema_problems",
    "step_by_key",
    "step_conflict",
    "step_noted",
    "step_settle",
    "store_provider_event",
    "task_note",
    "task_problems",
    "task_ring",
    "task_start",
    "tool_setting",
    "tools",
]
