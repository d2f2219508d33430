"""The answer as MCP carries it (docs/design.md §8): ``structuredContent`` under each
tool's ``outputSchema``, a text block a model cannot misread, and the tools' annotations, set
from what each one declares.

Three states, never two: ``unknown`` is never ``isError`` — it is the truth, and a model told
"error" retries. Only a call that was itself wrong (arguments that do not fit, an idempotency
key reused for another intent) is ``isError``, and it says that nothing was done.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

import mcp_types as types

from agentops.effects import Intent, Tool
from agentops.mcp.selectors import Answer, Effect

IDEMPOTENCY_KEY = "idempotencyKey"
"""A client's own key for a call (the MCP proposal's field; also read from ``_meta``)."""

REFUSALS = (
    "client_refused",
    "invalid_arguments",
    "key_conflict",
    "not_found",
    "record_refused",
    "record_unreadable",
    "task_refused",
    "unknown_reference",
)
ERRORS = frozenset({"client_refused", "invalid_arguments", "key_conflict"})

_TEXT = {"type": ["string", "null"]}
_TIME = {"type": ["string", "null"], "format": "date-time"}

EFFECT_PROPERTIES: dict[str, Any] = {
    "status": {
        "enum": ["done", "not_done", "unknown"],
        "description": "done: it happened (see evidence). not_done: it certainly did not. "
        "unknown: it may have happened and is being checked; never read it as a failure, and "
        "never try it another way meanwhile.",
    },
    "reason": {"type": "string", "description": "What happened, or why it is not known yet."},
    "intent": _TEXT,
    "tool": _TEXT,
    "object": {**_TEXT, "description": "The business object of the effect (charge:INV-2291)."},
    "reference": {
        **_TEXT,
        "description": "The effect's key in the journal: what is being checked, or what was "
        "done (give it to check_effect).",
    },
    "task": {**_TEXT, "description": "The agentops task that carries the effect."},
    "task_status": _TEXT,
    "evidence": {
        "type": "object",
        "description": "The provider's ids proving the effect (done only).",
    },
    "at": {**_TIME, "description": "When it was settled, or recorded."},
    "expected_at": {**_TIME, "description": "When the answer is expected (unknown)."},
    "waiting_for": {**_TEXT, "description": "What is being waited for (unknown)."},
    "lookups": {"type": "integer", "minimum": 0},
    "refused": {
        "enum": [None, *REFUSALS],
        "description": "Why this call itself did nothing, if it did not.",
    },
    "repeated": {
        "type": "boolean",
        "description": "This call found the effect an earlier call asked for; nothing new "
        "was started.",
    },
}


def _object(properties: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": dict(properties),
        "required": list(properties),
        "additionalProperties": False,
    }


EFFECT_SCHEMA = _object(EFFECT_PROPERTIES)
"""The ``outputSchema`` of every intent and of ``check_effect``."""

_REFUSED = {
    "enum": [None, *REFUSALS],
    "description": "Why this call itself did nothing, if it did not.",
}

EFFECTS_SCHEMA = _object(
    {
        "status": {
            "enum": ["known", "unknown", "refused"],
            "description": "known: effects is everything agentops' journal holds for the "
            "reference (none: nothing was recorded). unknown: the journal could not be read "
            "just now, so what was done cannot be told now — never read it as nothing done; "
            "ask again. refused: this call was wrong (see refused, reason) and read nothing.",
        },
        "reason": {"type": "string"},
        "refused": _REFUSED,
        "reference": {"type": "string"},
        "count": {
            "type": ["integer", "null"],
            "minimum": 0,
            "description": "How many effects are listed; null unless known.",
        },
        "effects": {
            "type": "array",
            "items": _object({**EFFECT_PROPERTIES, "kind": {"type": "string"}}),
        },
    }
)
"""The ``outputSchema`` of ``effects_for``."""

RECORD_SCHEMA = _object(
    {
        "found": {"type": "boolean"},
        "record": {"type": ["object", "null"]},
        "reason": {"type": "string"},
        "refused": _REFUSED,
    }
)
"""The ``outputSchema`` of a ``READ`` tool."""

REFERENCE_INPUT = _object(
    {
        "reference": {
            "type": "string",
            "minLength": 1,
            "maxLength": 255,
            "description": "A reference from an earlier answer (ao:…), your idempotency key, "
            "or the object (charge:INV-2291).",
        }
    }
)
BUSINESS_INPUT = _object(
    {
        "reference": {
            "type": "string",
            "minLength": 1,
            "maxLength": 255,
            "description": "A business reference: an invoice (INV-2291), a traveller, an object.",
        }
    }
)


# --- The tools and their annotations --------------------------------------------------------


def intent_tool(intent: Intent, effect: Tool) -> types.Tool:
    """An intent as an MCP tool. Its annotations come from its effect's declaration: it changes
    the world (not read-only), in the open world of providers; it is destructive only if its
    effect cannot be undone (``irreversible``: an email); it is idempotent by its key (the same
    intent is one effect, however often it is asked)."""
    schema = dict(intent.schema)
    schema["properties"] = {
        **schema.get("properties", {}),
        IDEMPOTENCY_KEY: {
            "type": "string",
            "minLength": 1,
            "maxLength": 255,
            "description": "Optional: your own key for this intent. Sent again with other "
            "arguments, it is refused.",
        },
    }
    return types.Tool(
        name=intent.name,
        title=intent.title or None,
        description=intent.description,
        input_schema=schema,
        output_schema=EFFECT_SCHEMA,
        annotations=types.ToolAnnotations(
            title=intent.title or None,
            read_only_hint=False,
            destructive_hint=bool(effect.irreversible),
            idempotent_hint=True,
            open_world_hint=True,
        ),
    )


def read_tool(tool: Tool) -> types.Tool:
    """A ``READ`` tool: read-only, so idempotent and not destructive; in the open world."""
    return types.Tool(
        name=tool.name,
        description=tool.description,
        input_schema=tool.schema,
        output_schema=RECORD_SCHEMA,
        annotations=types.ToolAnnotations(
            read_only_hint=True,
            destructive_hint=False,
            idempotent_hint=True,
            open_world_hint=True,
        ),
    )


JOURNAL_ANNOTATIONS = types.ToolAnnotations(
    read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)
CHECK_EFFECT = types.Tool(
    name="check_effect",
    title="Check an effect",
    description=(
        "What became of an effect: done (with evidence), not done (with the reason), or unknown "
        "(being checked, and when the answer is expected). Give it the reference an earlier "
        "answer named, your idempotency key, or the object (charge:INV-2291). Reads agentops' "
        "journal; changes nothing."
    ),
    input_schema=REFERENCE_INPUT,
    output_schema=EFFECT_SCHEMA,
    annotations=JOURNAL_ANNOTATIONS,
)
EFFECTS_FOR = types.Tool(
    name="effects_for",
    title="Effects for a reference",
    description=(
        "What has already been done for an invoice, a customer or a trip, across the tasks "
        "you started (every task, if your client holds tasks:read:all): each effect with its "
        "status, evidence and when. Ask this before acting when you do "
        "not remember what was done. Reads agentops' journal; changes nothing."
    ),
    input_schema=BUSINESS_INPUT,
    output_schema=EFFECTS_SCHEMA,
    annotations=JOURNAL_ANNOTATIONS,
)


# --- Answers --------------------------------------------------------------------------------


def _when(at: datetime | None) -> str | None:
    return at.astimezone(UTC).isoformat().replace("+00:00", "Z") if at else None


def _said(at: str | None) -> str:
    """A time of the structured content (``_when``), as the text says it."""
    if not at:
        return "soon"
    return datetime.fromisoformat(at).astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def structured(answer: Answer) -> dict[str, Any]:
    return {
        "status": answer.state,
        "reason": answer.reason,
        "intent": answer.intent,
        "tool": answer.tool,
        "object": answer.object,
        "reference": answer.reference,
        "task": answer.task,
        "task_status": answer.task_status,
        "evidence": dict(answer.evidence) if answer.state == "done" else {},
        "at": _when(answer.at),
        "expected_at": _when(answer.expected_at),
        "waiting_for": answer.waiting_for,
        "lookups": answer.lookups,
        "refused": answer.refused,
        "repeated": answer.repeated,
    }


def _evidence_text(evidence: Mapping[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in evidence.items() if v not in (None, "", {}, []))


def text(answer: Answer) -> str:
    """One paragraph a model cannot misread, said from the structured content alone
    (:func:`said`), so the two never tell different things."""
    return said(structured(answer), noun=answer.noun, subject=answer.subject)


def said(fields: Mapping[str, Any], *, noun: str = "effect", subject: str = "") -> str:
    """The text of an answer whose structured content is ``fields``: its status first, its
    reason as it stands there, then what to do (and not do) now. ``noun`` and ``subject``
    only name the effect ("the charge for invoice INV-2291"); every fact is a field."""
    status, reason, reference = fields["status"], fields["reason"], fields["reference"]
    label = fields["object"] or "this reference"
    what = f"the {noun} for {subject}" if subject else f"the effect on {label}"
    others = f"no other {noun} for {subject}" if subject else f"no other effect on {label}"
    again = (f"call {fields['intent']} again" if fields["intent"] else "ask check_effect again") + (
        f' or check_effect("{reference}")' if reference else ""
    )
    if fields["refused"]:
        return f"{status} — {reason}."
    if status == "done":
        proof = _evidence_text(fields["evidence"])
        return (
            f"done — {what} happened"
            + (f" ({proof})" if proof else "")
            + f" on {_said(fields['at'])}: {reason}; reference {reference}, task "
            f"{fields['task']}. It will not be done again: asking again returns this same answer."
        )
    if status == "not_done":
        return (
            f"not_done — {what} did not happen: {reason}"
            + (f" (reference {reference})" if reference else "")
            + "."
        )
    expected = (
        f"answer expected by {_said(fields['expected_at'])}"
        if fields["expected_at"]
        else "no time is set for the answer"
    )
    if reference is None:
        return (
            f"unknown — {reason}. Waiting for {fields['waiting_for']} ({expected}). Meanwhile "
            f"{others} may start; {again} for the answer."
        )
    return (
        f"unknown — {what} is not settled, and it may have happened: {reason}. agentops is "
        f"checking reference {reference} (waiting for {fields['waiting_for']}; {expected}). "
        f"Until it is settled, {others} may start. This is not a failure: do not try it "
        f"another way; {again} to hear the answer."
    )


def result(answer: Answer) -> types.CallToolResult:
    fields = structured(answer)
    return types.CallToolResult(
        content=[
            types.TextContent(
                type="text", text=said(fields, noun=answer.noun, subject=answer.subject)
            )
        ],
        structured_content=fields,
        is_error=answer.refused in ERRORS,
    )


def effects_result(reference: str, effects: Iterable[Effect]) -> types.CallToolResult:
    found = list(effects)
    items = [{**structured(e.answer), "kind": e.kind} for e in found]
    recorded = f"{len(found)} effect(s) recorded" if found else "no effect recorded"
    lines = [f"known — {recorded} for {reference}, newest first:"]
    for item in items:  # each said from its structured content
        proof = _evidence_text(item["evidence"]) if item["status"] == "done" else item["reason"]
        lines.append(
            f"- {item['status']}: {item['tool']} on {item['object'] or '-'} ({proof}); "
            f"{_said(item['at'])}; reference {item['reference']}"
        )
    if not found:
        lines = [
            f"known — {recorded} for {reference}: agentops has recorded none for it in the "
            "tasks this client may read (those it started, or every task with the scope "
            "tasks:read:all)."
        ]
    return types.CallToolResult(
        content=[types.TextContent(type="text", text="\n".join(lines))],
        structured_content={
            "status": "known",
            "reason": recorded,
            "refused": None,
            "reference": reference,
            "count": len(items),
            "effects": items,
        },
    )


def effects_unknown(reference: str, why: str) -> types.CallToolResult:
    """``effects_for`` when the journal cannot be read: unknown — it cannot tell now, which
    says nothing of what was done (never "no effect", which a model reads as "do it")."""
    reason = (
        f"{why}: what was done for {reference} cannot be told now, which says nothing of "
        "whether anything was; ask again in a moment before acting on it"
    )
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=f"unknown — {reason}.")],
        structured_content={
            "status": "unknown",
            "reason": reason,
            "refused": None,
            "reference": reference,
            "count": None,
            "effects": [],
        },
        is_error=False,
    )


def effects_refused(reference: str, reason: str, code: str) -> types.CallToolResult:
    """``effects_for`` refused (its client, its arguments): it read nothing."""
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=f"refused — {reason}.")],
        structured_content={
            "status": "refused",
            "reason": reason,
            "refused": code,
            "reference": reference,
            "count": None,
            "effects": [],
        },
        is_error=code in ERRORS,
    )


def record_result(
    found: Mapping[str, Any] | None, reason: str, *, refused: str | None = None
) -> types.CallToolResult:
    """A READ tool's answer: the record, or why there is none (``reason``: no such record,
    the system of record could not tell, or this call was refused: ``refused``)."""
    text_ = f"found: {json.dumps(dict(found), sort_keys=True)}" if found is not None else reason
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text_)],
        structured_content={
            "found": found is not None,
            "record": dict(found) if found is not None else None,
            "reason": reason,
            "refused": refused,
        },
        is_error=refused in ERRORS,
    )
