"""Forms of the operators' pages: an operator's form is outside input like any other."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from django import forms

from agentops.kinds import Kind


class ReasonForm(forms.Form):
    """Confirm an action; ``reason`` is required where the action asks for one."""

    reason = forms.CharField(
        max_length=2000, required=False, widget=forms.Textarea(attrs={"rows": 2})
    )

    def __init__(self, *args: Any, reason_required: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["reason"].required = reason_required


class ResolveForm(forms.Form):
    outcome = forms.ChoiceField(
        choices=[("done", "it happened"), ("not_done", "it did not happen")],
        widget=forms.RadioSelect,
    )
    evidence = forms.CharField(
        max_length=200,
        required=False,
        help_text="What you found at the provider (a charge, message or booking id).",
    )
    reason = forms.CharField(max_length=2000, widget=forms.Textarea(attrs={"rows": 2}))

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("outcome") == "done" and not (data.get("evidence") or "").strip():
            self.add_error("evidence", "Give the evidence you found at the provider.")
        return data


class ApproveForm(forms.Form):
    approval = forms.IntegerField(widget=forms.HiddenInput)
    digest = forms.CharField(max_length=64, widget=forms.HiddenInput)
    reason = forms.CharField(
        max_length=2000,
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Optional: recorded with your name, the time and exactly what you approved.",
    )


class CorrectForm(forms.Form):
    """A step settled not done that happened after all: the evidence found, and why."""

    evidence = forms.CharField(
        max_length=4000,
        widget=forms.Textarea(attrs={"rows": 5, "spellcheck": "false"}),
        help_text="The effect as the provider shows it, as a JSON object (the conflicting "
        "report's evidence is filled in): every field the tool proves it done with.",
    )
    reason = forms.CharField(max_length=2000, widget=forms.Textarea(attrs={"rows": 2}))

    def clean_evidence(self) -> dict[str, Any]:
        try:
            value = json.loads(self.cleaned_data["evidence"])
        except ValueError as exc:
            raise forms.ValidationError(f"Not JSON: {exc}.") from exc
        if not isinstance(value, dict) or not value:
            raise forms.ValidationError('Give a JSON object, such as {"charge": "ch_…"}.')
        return value


class RejectForm(forms.Form):
    approval = forms.IntegerField(widget=forms.HiddenInput)
    reason = forms.CharField(max_length=2000, widget=forms.Textarea(attrs={"rows": 2}))


# --- Starting a task: a form built from the kind's refs schema ------------------------------


class StartTaskForm(forms.Form):
    """Fields from the kind's JSON schema for its refs; the same checks as ``start_task``."""

    goal = forms.CharField(max_length=2000, widget=forms.Textarea(attrs={"rows": 2}))

    def __init__(self, *args: Any, kind: Kind, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.kind = kind
        schema = kind.refs_schema
        required = set(schema.get("required", []))
        for name, spec in schema["properties"].items():
            self.fields[name] = _field(name, spec, required=name in required)
        if kind.saga is not None:
            self.fields["hold"] = forms.MultipleChoiceField(
                choices=[(t, t) for t in kind.saga.steps],
                required=False,
                widget=forms.CheckboxSelectMultiple,
                help_text="Steps a person approves before they run.",
            )

    def refs(self) -> dict[str, Any]:
        """The refs as the kind's schema wants them (validated by ``task_start``)."""
        out: dict[str, Any] = {}
        for name, spec in self.kind.refs_schema["properties"].items():
            value = self.cleaned_data.get(name)
            if value in (None, ""):
                continue
            if spec.get("type") == "array":
                out[name] = _rows(str(value), spec.get("items") or {})
            else:
                out[name] = value
        return out

    def plan(self) -> list[dict[str, Any]] | None:
        if self.kind.saga is None:
            return None
        held = set(self.cleaned_data.get("hold") or [])
        return [{"tool": t, **({"hold": True} if t in held else {})} for t in self.kind.saga.steps]


def _field(name: str, spec: Mapping[str, Any], *, required: bool) -> forms.Field:
    label = name.replace("_", " ")
    if "enum" in spec:
        choices = [("", "—")] + [(v, v) for v in spec["enum"]]
        return forms.ChoiceField(label=label, choices=choices, required=required)
    if spec.get("type") == "integer":
        return forms.IntegerField(
            label=label,
            required=required,
            min_value=spec.get("minimum"),
            help_text=str(spec.get("description", "")),
        )
    if spec.get("type") == "array":
        return forms.CharField(
            label=label,
            required=required,
            widget=forms.Textarea(attrs={"rows": 3}),
            help_text=_rows_help(spec.get("items") or {}),
        )
    widget: forms.Widget | None = None
    if spec.get("format") == "date":
        widget = forms.DateInput(attrs={"type": "date"})
    elif name == "email":
        widget = forms.EmailInput()
    return forms.CharField(label=label, required=required, max_length=254, widget=widget)


def _columns(items: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any], bool]]:
    """A list's rows as the kind's schema has them: each column's name, schema, whether
    required, in the schema's order."""
    required = set(items.get("required", []))
    return [(n, s, n in required) for n, s in (items.get("properties") or {}).items()]


def _rows_help(items: Mapping[str, Any]) -> str:
    """``One per line: invoice, email[, reminder].``"""
    shown = ""
    for i, (name, _, required) in enumerate(_columns(items)):
        part = name.replace("_", " ")
        shown += (", " if i else "") + part if required else f"[, {part}]"
    return f"One per line: {shown}."


def _rows(text: str, items: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Rows typed one per line, comma-separated, columns in the schema's order."""
    columns = _columns(items)
    rows = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if not any(parts):
            continue
        row: dict[str, Any] = {}
        for (name, spec, _), part in zip(columns, parts, strict=False):
            if part == "":
                continue
            row[name] = int(part) if spec.get("type") == "integer" and part.isdigit() else part
        rows.append(row)
    return rows


def problems_by_field(form: forms.Form, problems: list[str]) -> None:
    """Put ``task_start``'s sentences beside the fields they are about."""
    for problem in problems:
        where, _, message = problem.partition(": ")
        name = where.removeprefix("refs.").split(".")[0]
        if where == "goal":
            form.add_error("goal", message)
        elif name in form.fields and where.startswith("refs."):
            form.add_error(name, message)
        else:
            form.add_error(None, problem)


def as_json(value: Any) -> str:
    return json.dumps(value, indent=1, sort_keys=True, ensure_ascii=False, default=str)


# --- The list's filters ------------------------------------------------------------------------


class ListForm(forms.Form):
    """What the task list is asked for, from its URL: anything unknown is left out."""

    # The search is taken as typed (see query()): a text that cannot be in the journal (a NUL,
    # a page of characters) must match nothing, not be dropped and match everything.
    state = forms.CharField(max_length=30, required=False)
    kind = forms.CharField(max_length=100, required=False)
    attention = forms.CharField(max_length=30, required=False)
    since = forms.DateField(required=False)
    until = forms.DateField(required=False)
    sort = forms.CharField(max_length=20, required=False)

    def __init__(
        self,
        *args: Any,
        states: Mapping[str, str],
        kinds: Mapping[str, str],
        codes: Mapping[str, str],
        sorts: Mapping[str, str],
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.allowed = {"state": states, "kind": kinds, "attention": codes, "sort": sorts}

    def query(self) -> dict[str, Any]:
        """The filters that are valid, each as the selector takes it."""
        self.is_valid()
        data = getattr(self, "cleaned_data", {})
        found: dict[str, Any] = {"q": str(self.data.get("q") or "")}
        for name, allowed in self.allowed.items():
            value = data.get(name) or ""
            found[name] = value if value in allowed else ""
        found["since"] = data.get("since")
        found["until"] = data.get("until")
        return found
