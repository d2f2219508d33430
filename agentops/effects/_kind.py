"""Task kinds: what a task is for, and what the harness holds it to (docs/design.md §6, §7).

A kind declares its references (a JSON schema, checked at the door), the tools it may use
and how each one's arguments bind to the references (an allowlist: any other tool is, for
that task, unknown), the money it may move per currency, its step limit, and — for effects
that only make sense together — its saga. The model (or a prompt injection in a goal) may
propose anything; :class:`KindRules` is what the journal asks before recording it
(``journal.protocols.Rules``). A mismatch is a recorded refusal that tells the model, in
one sentence, what it may do instead.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentops.effects._schema import schema_validator
from agentops.effects._tool import Tool
from agentops.money import money_text
from journal.keys import name_problem, same_object
from journal.outcomes import StepState
from journal.protocols import (
    CLOSING,
    Bound,
    Call,
    CostClass,
    Refusal,
    Refused,
    StepFact,
    TaskFacts,
)

if TYPE_CHECKING:
    from agentops.effects._audit import ProviderEffect

GOAL_MAX_CHARS = 2000
REFS_MAX_BYTES = 16 * 1024


def refs_object(properties: Mapping[str, Any], required: Sequence[str]) -> dict[str, Any]:
    """A JSON schema for an object with exactly these properties (no others)."""
    return {
        "type": "object",
        "properties": dict(properties),
        "required": list(required),
        "additionalProperties": False,
    }


# --- Bindings: how a call's arguments must relate to the task --------------------------------

REQUIRED = object()


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, str) and isinstance(b, str):
        return same_object(a, b)
    return bool(a == b) and type(a) is type(b)


@dataclass(frozen=True)
class Check:
    problems: list[str] = field(default_factory=list)
    offsets: int | None = None


@dataclass(frozen=True)
class Ref:
    """The argument ``arg`` is the task's ``ref`` (or ``default`` when the refs do not say;
    with ``default=None`` an absent ref means the argument must be absent too). Names are
    compared as the guards compare them (case and spacing aside); ``exact`` compares
    character for character, for a provider's ids (``cus_…``), in which case tells two
    apart."""

    arg: str
    ref: str
    default: Any = REQUIRED
    exact: bool = False

    def check(self, args: Mapping[str, Any], refs: Mapping[str, Any], facts: TaskFacts) -> Check:
        expected = refs.get(self.ref, None if self.default is REQUIRED else self.default)
        given = args.get(self.arg)
        if expected is None:
            if self.arg in args:
                return Check([f"{self.arg}: the task names no {self.ref}; leave it out"])
            return Check()
        if self.arg not in args:
            return Check([f"{self.arg}: must be {expected!r} (the task's {self.ref})"])
        same = given == expected and type(given) is type(expected)
        if not (same if self.exact else _same(given, expected)):
            return Check(
                [f"{self.arg}: {given!r} is not the task's; its {self.ref} is {expected!r}"]
            )
        return Check()


@dataclass(frozen=True)
class OneOf:
    """The argument is one of a fixed set (what an email may be for, in this kind)."""

    arg: str
    values: tuple[str, ...]

    def check(self, args: Mapping[str, Any], refs: Mapping[str, Any], facts: TaskFacts) -> Check:
        if args.get(self.arg) not in self.values:
            allowed = ", ".join(self.values)
            return Check([f"{self.arg}: {args.get(self.arg)!r} is not for this task ({allowed})"])
        return Check()


@dataclass(frozen=True)
class Row:
    """The arguments name one row of a list in the refs (``by``: argument → field that
    identifies it) and match that row (``fields``: argument → (field, default))."""

    rows: str
    by: tuple[str, str]
    fields: Mapping[str, tuple[str, Any]]

    def check(self, args: Mapping[str, Any], refs: Mapping[str, Any], facts: TaskFacts) -> Check:
        arg, key = self.by
        rows = [r for r in refs.get(self.rows) or [] if isinstance(r, Mapping)]
        row = next((r for r in rows if _same(r.get(key), args.get(arg))), None)
        if row is None:
            known = ", ".join(str(r.get(key)) for r in rows) or "none"
            return Check([f"{arg}: {args.get(arg)!r} is not one of the task's ({known})"])
        problems = []
        for name, (source, default) in self.fields.items():
            expected = row.get(source, default)
            if not _same(args.get(name), expected):
                problems.append(
                    f"{name}: {args.get(name)!r} is not the task's; for {row.get(key)} it is "
                    f"{expected!r}"
                )
        return Check(problems)


def _own_effects(facts: TaskFacts, tool: str) -> list[StepFact]:
    """This task's own done effects of ``tool`` that nothing has undone yet."""
    return [s for s in facts.steps if s.tool == tool and s.state == StepState.DONE and not s.offset]


@dataclass(frozen=True)
class Own:
    """An undo: the argument names an effect this task made with ``tool`` (its evidence's
    ``field``), and the call is recorded as that step's undo. The harness, not the model,
    maps the evidence to the effect: another task's payment is never this task's to
    refund."""

    arg: str
    tool: str
    field: str
    amount_arg: str = ""  # an amount, if given, must be the whole effect's

    def check(self, args: Mapping[str, Any], refs: Mapping[str, Any], facts: TaskFacts) -> Check:
        mine = _own_effects(facts, self.tool)
        step = next((s for s in mine if s.evidence.get(self.field) == args.get(self.arg)), None)
        if step is None:
            known = ", ".join(str(s.evidence.get(self.field)) for s in mine) or "none"
            return Check(
                [
                    f"{self.arg}: {args.get(self.arg)!r} is not an effect of this task's "
                    f"{self.tool} that stands (this task's: {known})"
                ]
            )
        whole = step.evidence.get("amount")
        if self.amount_arg in args and args[self.amount_arg] != whole:
            return Check(
                [f"{self.amount_arg}: the harness undoes {step.key} whole ({whole}); leave it out"]
            )
        return Check(offsets=step.n)


@dataclass(frozen=True)
class Append:
    """The harness, not the model, ends the text argument ``arg`` with ``text(facts, args)``
    (a paragraph; None: nothing to add): a fact of the task that the model is not trusted to
    write or copy — the customer's signed link to its payment page — as :class:`Ref` makes
    the recipient the task's. It is added to each call of the tool, whichever planner decided
    it, before the call is checked and recorded (``KindRules.filled``): the journal holds
    what is sent, every attempt sends the same, and an approval is asked for it whole."""

    arg: str
    text: Callable[[TaskFacts, Mapping[str, Any]], str | None]

    def check(self, args: Mapping[str, Any], refs: Mapping[str, Any], facts: TaskFacts) -> Check:
        return Check()  # written by the harness: nothing of the model's to refuse

    def fill(self, args: Mapping[str, Any], facts: TaskFacts) -> dict[str, Any]:
        value = args.get(self.arg)
        added = self.text(facts, args) if isinstance(value, str) else None
        if not added:
            return dict(args)
        return {**args, self.arg: f"{str(value).rstrip()}\n\n{added}"}


Bind = Ref | OneOf | Row | Own | Append


@dataclass(frozen=True)
class Saga:
    """Effects that only make sense together (docs/design.md §7): the default plan (tools in
    order), the amounts above which a step is held for a person, and the steps before which
    what the saga holds must be seen to still stand (it is charged for)."""

    steps: tuple[str, ...]
    hold_over: Mapping[str, int] = field(default_factory=dict)
    verify_before: frozenset[str] = frozenset()

    def default_plan(self) -> list[dict[str, Any]]:
        return [{"tool": tool} for tool in self.steps]


@dataclass(frozen=True)
class Closing:
    """The harness's last call of a task whose done effects were all undone — a saga
    compensated (a trip rejected by a person, or that could not be booked), a charge refunded
    by a person's compensation — before the task ends ``compensated``: a message to the
    customer, say. ``args(refs, facts)`` builds its arguments from the task's references and
    what its steps did (None: nothing to say). It is the kind's code, never the model's: made
    once per task (the runner records it once, keyed like any step, and looks it up like any
    step its tool can look up), its kind's :class:`Append` binds written into it, and an
    irreversible tool only (checked at start-up, agentops.E119): nothing is left to undo it."""

    tool: str
    args: Callable[[Mapping[str, Any], TaskFacts], Mapping[str, Any] | None]


@dataclass(frozen=True)
class Followup:
    """A task to start with another's end (:attr:`Kind.on_cancel`): its kind, goal and
    references, as :func:`~agentops.effects.task_start` takes them."""

    kind: str
    goal: str
    refs: Mapping[str, Any]


@dataclass(frozen=True)
class Kind:
    """What a task of this kind is for, and the limits the harness holds it to.

    - ``name``, ``description``: how people and the API name it.
    - ``refs_schema``: the task's business references, checked at the door: a renewal
      whose refs lack an amount would otherwise fail on every run, and one whose receipt
      address is not an address would charge before it failed. ``refs_checks`` add rules a
      schema cannot say (an amount under the cap, a stay of a night or more).
    - ``binds``: per tool the kind may use (an allowlist: any other is an unknown tool), how
      its arguments must relate to the refs — the amount, the invoice, the recipient are
      the task's, whatever the model proposes; an undo targets only this task's own effect;
      and what the harness writes into them itself (:class:`Append`: the customer's link).
    - ``money_caps``: minor units a task may move in all, per currency, over every tool
      that declares its ``money`` (done, in flight or unknown); a currency not listed is
      refused.
    - ``max_steps``: a task that keeps deciding without finishing goes to a person.
    - ``saga``: effects that only make sense together, undone newest first when one cannot
      happen.
    - ``references``: where in the refs the task's business references are (``invoice``,
      ``invoices.*.invoice``), for people and programs to find it by.
    - ``customer``: where in the refs the person the task is for is named, in the order
      people read them (``traveller``, ``email``): the operators' list shows the first found
      and sorts by it.
    - ``closing``: the call the harness makes once a compensation has undone the task's
      effects (:class:`Closing`: tell the customer), before the task ends compensated.
    - ``on_cancel``: when a person cancels a task of the kind outright, no worker runs on it
      again, so no closing call is made; ``on_cancel(refs, facts)`` may name a task to start
      instead (:class:`Followup`: a message to the customer, by a kind of its own), or None.
      It is started in the cancel's own transaction (agentops/operators/services.py), so
      once: a task cancelled is not cancelled again. Its effects are keyed steps, as any.
    - ``on_undone_elsewhere``: once a person resolves the provider audit's finding that one
      of the task's effects was undone at the provider with no undo in the journal (a refund
      made in its dashboard), ``on_undone_elsewhere(refs, facts, effect)`` may name a task to
      start (the customer told of the refund), or None; ``effect`` is what the provider
      listed (its ``raw``, as the app's audit lists it). Started with the resolution (the
      audit runs as the worker role, which starts no task), and not again for the same
      references (agentops.kinds.followup_start): key them by what was undone.
    """

    name: str
    description: str
    refs_schema: dict[str, Any]
    binds: Mapping[str, tuple[Bind, ...]]
    money_caps: Mapping[str, int] = field(default_factory=dict)
    max_steps: int = 20
    refs_checks: tuple[Callable[[Mapping[str, Any]], list[str]], ...] = ()
    saga: Saga | None = None
    references: tuple[str, ...] = ()
    customer: tuple[str, ...] = ()
    closing: Closing | None = None
    on_cancel: Callable[[Mapping[str, Any], TaskFacts], Followup | None] | None = None
    on_undone_elsewhere: (
        Callable[[Mapping[str, Any], TaskFacts, ProviderEffect], Followup | None] | None
    ) = None

    @property
    def tools(self) -> frozenset[str]:
        return frozenset(self.binds)

    def customer_of(self, refs: Mapping[str, Any]) -> str:
        """Who the task is for, as people read it (the first of ``customer`` found)."""
        for path in self.customer:
            found = [v for v in _at(refs, path.split(".")) if isinstance(v, str) and v]
            if found:
                return found[0] + (f" +{len(found) - 1}" if len(found) > 1 else "")
        return ""

    def references_of(self, refs: Mapping[str, Any]) -> list[str]:
        """The business references a task of this kind names, in order (``invoice``, each
        ``invoices.*.invoice``)."""
        found: list[str] = []
        for path in self.references:
            found.extend(str(v) for v in _at(refs, path.split(".")) if v not in (None, ""))
        return found


def _at(value: Any, path: list[str]) -> list[Any]:
    if not path:
        return [value]
    head, rest = path[0], path[1:]
    if head == "*":
        return [v for item in value for v in _at(item, rest)] if isinstance(value, list) else []
    if isinstance(value, Mapping) and head in value:
        return _at(value[head], rest)
    return []


class TaskRefused(ValueError):
    """A task that is not started: its kind, goal or references are not acceptable."""

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = list(problems)


# --- At the door: a task's goal and refs, a saga's plan ---------------------------------------


def _texts(value: Any, path: str) -> list[tuple[str, str]]:
    """Every text in ``value`` (refs), with its path."""
    if isinstance(value, str):
        return [(path, value)]
    if isinstance(value, Mapping):
        return [t for k, v in value.items() for t in _texts(v, f"{path}.{k}" if path else k)]
    if isinstance(value, list):
        return [t for i, v in enumerate(value) for t in _texts(v, f"{path}.{i}")]
    return []


def _names_are_safe(refs: Mapping[str, Any]) -> list[str]:
    """Every text a task names objects with can be normalised safely (docs/design.md §6):
    a name with a control character, a line separator, a private-use or unassigned
    character is refused at the door rather than guessed at."""
    problems = []
    for path, text in _texts(refs, ""):
        problem = name_problem(text)
        if problem is not None:
            problems.append(f"{path}: {problem}")
    return problems


def task_problems(*, kind: Kind, goal: Any, refs: Any) -> list[str]:
    """Everything wrong with a task before it is started, each as a sentence; [] if nothing."""
    problems = []
    if not isinstance(goal, str) or not goal.strip():
        problems.append("goal: must be a non-empty text")
    elif len(goal) > GOAL_MAX_CHARS:
        problems.append(f"goal: {len(goal)} characters; at most {GOAL_MAX_CHARS}")
    elif any(ord(c) < 32 and c not in "\n\t" for c in goal):
        problems.append("goal: must not contain control characters")
    if not isinstance(refs, Mapping):
        return [*problems, "refs: must be a JSON object"]
    size = len(json.dumps(refs, default=str).encode())
    if size > REFS_MAX_BYTES:
        return [*problems, f"refs: {size} bytes; at most {REFS_MAX_BYTES}"]
    validator, quick = schema_validator(kind.refs_schema)
    value = dict(refs)
    errors = (
        []  # the compiled schema accepts it: nothing to tell
        if quick is not None and quick(value)
        else sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path))
    )
    for error in errors:
        path = ".".join(str(p) for p in error.absolute_path) or "refs"
        message = (
            "must not contain control characters" if error.validator == "not" else error.message
        )
        problems.append(f"refs.{path}: {message}" if path != "refs" else f"refs: {message}")
    if not errors:
        for check in (_names_are_safe, *kind.refs_checks):
            problems.extend(f"refs.{p}" for p in check(refs))
    return problems


def plan_problems(*, kind: Kind, plan: Any, tools: Mapping[str, Tool]) -> list[str]:
    """What is wrong with a saga's plan, each as a sentence: it is validated when it is
    recorded, so a plan that would send an email before a step that may fail, or place a
    step nothing can undo without a person's approval, never starts."""
    if kind.saga is None:
        return [] if not plan else [f"plan: a {kind.name} task is not a saga and takes no plan"]
    if not isinstance(plan, list) or not plan:
        return ["plan: must be a non-empty list of steps"]
    problems: list[str] = []
    seen: set[str] = set()
    irreversible_from: str | None = None
    for i, entry in enumerate(plan):
        where = f"plan[{i}]"
        if not isinstance(entry, Mapping) or set(entry) - {"tool", "hold"}:
            problems.append(f"{where}: must be an object with a tool and, if held, hold: true")
            continue
        name, hold = entry.get("tool"), entry.get("hold", False)
        tool = tools.get(name) if isinstance(name, str) else None
        if tool is None or name not in kind.saga.steps or not isinstance(hold, bool):
            problems.append(f"{where}: {name!r} is not a step of a {kind.name} saga")
            continue
        if name in seen:
            problems.append(f"{where}: {name} is planned twice")
        seen.add(name)
        if tool.irreversible:
            irreversible_from = irreversible_from or name
        elif irreversible_from is not None:
            problems.append(
                f"{where}: {name} may fail, and comes after {irreversible_from}, which cannot "
                "be undone: irreversible steps go last"
            )
        if not tool.irreversible and tool.compensation is None and not hold:
            problems.append(
                f"{where}: nothing undoes {name} and it is not irreversible: it must be held "
                "for a person's approval (hold: true)"
            )
    return problems


# --- At run time: the rules the journal asks ---------------------------------------------


class KindRules:
    """``journal.protocols.Rules`` for one task: its kind's bindings, limits and saga."""

    def __init__(
        self,
        kind: Kind,
        refs: Mapping[str, Any],
        tools: Mapping[str, Tool],
        plan: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        self.kind, self.refs, self.tools = kind, refs, tools
        self.plan = list(plan) or (kind.saga.default_plan() if kind.saga else [])

    @property
    def saga(self) -> bool:
        return self.kind.saga is not None

    def hold(self, *, tool: str, args: Mapping[str, Any], facts: TaskFacts) -> str | None:
        if self.kind.saga is None:
            return None
        planned = next((e for e in self.plan if e.get("tool") == tool), {})
        if planned.get("hold"):
            return f"the plan holds {tool} for a person's approval"
        limit = self.kind.saga.hold_over.get(tool)
        known = self.tools.get(tool)
        money = known.money if known is not None else None
        amount = args.get(money.amount) if money is not None else None
        if limit is not None and isinstance(amount, int) and amount > limit:
            currency = str(args.get(money.currency, "")) if money is not None else ""
            return (
                f"{tool} of {money_text(amount, currency)} is above "
                f"{money_text(limit, currency)}: a person approves it first"
            )
        undos = {t.compensation for t in self.tools.values()}
        if (
            known is not None
            and known.cost != CostClass.READ  # a read acts on nothing: nothing to undo
            and known.compensation is None
            and not known.irreversible
            and tool not in undos  # an undo is bound to the effect it undoes (Own)
            and not any(e.get("tool") == tool for e in self.plan)
        ):
            return f"nothing undoes {tool} and it is not irreversible: a person approves it"
        return None

    def verify_before(self, *, tool: str) -> bool:
        return self.kind.saga is not None and tool in self.kind.saga.verify_before

    def closing(self, *, facts: TaskFacts) -> Call | None:
        closing = self.kind.closing
        args = closing.args(self.refs, facts) if closing is not None else None
        if closing is None or args is None:
            return None
        filled = self.filled(tool=closing.tool, args=args, facts=facts)
        return Call(closing.tool, filled, raw={"harness": CLOSING})

    def filled(self, *, tool: str, args: Mapping[str, Any], facts: TaskFacts) -> dict[str, Any]:
        """The call's arguments with what the kind's binds write into them (:class:`Append`),
        before the call is checked and recorded: whatever the planner, the harness binds it."""
        filled = dict(args)
        for bind in self.kind.binds.get(tool, ()):
            if isinstance(bind, Append):
                filled = bind.fill(filled, facts)
        return filled

    def _order(self, tool: str, facts: TaskFacts) -> Refused | None:
        """An irreversible step of a saga waits for every planned step that might fail."""
        known = self.tools.get(tool)
        if self.kind.saga is None or known is None or not known.irreversible:
            return None
        done = {s.tool for s in facts.steps if s.state == StepState.DONE and not s.offset}
        pending = [
            e["tool"]
            for e in self.plan
            if e.get("tool") in self.tools
            and not self.tools[e["tool"]].irreversible
            and e["tool"] not in done
        ]
        if not pending:
            return None
        return Refused(
            Refusal.ORDER,
            f"refused: {tool} cannot be undone, and {', '.join(pending)} could still fail; "
            f"nothing was sent; do {pending[0]} first",
            {"before": pending},
        )

    def check(self, *, tool: str, args: Mapping[str, Any], facts: TaskFacts) -> Refused | Bound:
        problems: list[str] = []
        offsets = None
        for bind in self.kind.binds.get(tool, ()):
            result = bind.check(args, self.refs, facts)
            problems.extend(result.problems)
            offsets = offsets if result.offsets is None else result.offsets
        if problems:
            return Refused(
                Refusal.NOT_THIS_TASKS,
                f"refused: the arguments are not this task's: {'; '.join(problems)}; nothing "
                "was sent; call it again with the task's own values",
                {"mismatches": problems},
            )
        out_of_order = self._order(tool, facts)
        if out_of_order is not None:
            return out_of_order
        known = self.tools.get(tool)
        if known is not None and known.money is not None:
            over = self._over_cap(known, args, facts)
            if over is not None:
                return over
        return Bound(offsets=offsets)

    def _over_cap(self, tool: Tool, args: Mapping[str, Any], facts: TaskFacts) -> Refused | None:
        """Whether moving this amount would take the task past its kind's cap."""
        money = tool.money
        if money is None:
            return None
        currency, amount = args.get(money.currency), args.get(money.amount)
        if not isinstance(currency, str) or not isinstance(amount, int):
            return None  # the tool's schema says what it takes; its validation refused it
        cap = self.kind.money_caps.get(currency)
        if cap is None:
            return Refused(
                Refusal.LIMIT,
                f"refused: a {self.kind.name} task may not move money in {currency}; nothing "
                "was sent",
            )
        remaining = cap - money_committed(facts, currency, self.tools)
        if amount > remaining:
            return Refused(
                Refusal.LIMIT,
                f"refused: amount {amount} ({money_text(amount, currency)}) exceeds what this "
                f"task may still move: {money_text(remaining, currency)} of its limit of "
                f"{money_text(cap, currency)}; nothing was sent",
                {"cap": cap, "remaining": remaining},
            )
        return None


def money_committed(facts: TaskFacts, currency: str, tools: Mapping[str, Tool]) -> int:
    """Minor units of ``currency`` the task has moved or may have moved (done, in flight or
    unknown, not undone), over every tool that declares its money. Asked before every call
    that moves money, so it is folded (:meth:`TaskFacts.fold`): a step adds its own amount,
    not the whole task's again."""
    moves = tuple(sorted((name, t.money) for name, t in tools.items() if t.money is not None))

    def add(total: int, step: StepFact) -> int:
        money = next((m for name, m in moves if name == step.tool), None)
        if money is None or step.offset:
            return total
        if step.state not in (StepState.DONE, StepState.PENDING, StepState.UNKNOWN):
            return total
        amount = step.args.get(money.amount)
        if step.args.get(money.currency) == currency and isinstance(amount, int):
            return total + amount
        return total

    return facts.fold(("money_committed", currency, moves), add, 0)
