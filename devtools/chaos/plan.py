"""What a chaos run does, decided by its seed alone: the tasks, the world's settings, the
provider faults and the timeline of process faults. Pure: no clock, no database, no I/O.

The same seed gives the same plan, so two runs (the safe harness and the naive one, or the
same harness twice) face the same tasks and the same faults at the same moments. Which
request a probabilistic fault hits depends on the order requests arrive in, which the
machine's timing decides; the figures of two runs of one seed are close, not identical.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from typing import Any

import stripe

from devtools.chaos.model import Model

KINDS = ("renewal", "trip", "reminders")
KIND_WEIGHTS = (0.5, 0.3, 0.2)
TRIP_HOLD_OVER = 300_000  # agentops/kinds.py: a trip charge above this waits for a person
HOTELS = ("Alfama", "Baixa", "Chiado", "Belem", "Graca")
FLIGHTS = ("TP1351", "TP1352", "LH1169", "BA0500")


@dataclass(frozen=True)
class TaskSpec:
    """One task of the run. ``decision`` is what the operator (the chaos driver) does when a
    held trip asks for approval: ``approve`` or ``reject``."""

    n: int
    kind: str
    goal: str
    refs: dict[str, Any]
    decision: str = ""
    repeats: int | None = None
    """The ``n`` of an earlier task this one repeats on purpose (a second task for the same
    invoice, reminder or trip): one business effect, asked for twice."""

    @property
    def held(self) -> bool:
        return self.kind == "trip" and int(self.refs["amount"]) > TRIP_HOLD_OVER


@dataclass(frozen=True)
class ProviderFault:
    """A fault the provider applies to a share of one operation's requests (seeded)."""

    provider: str
    operation: str
    fault: str
    probability: float
    seed: int
    delay: float = 0.0
    times: int | None = None
    """How many requests it hits at most (None: as many as its probability picks)."""


@dataclass(frozen=True)
class Event:
    """A fault at a moment: ``at`` seconds after the run starts.

    ``worker_sigkill`` (``pick`` chooses the worker; a ``target`` such as
    ``during_call:charge_customer`` makes its replacement die at that point of its first such
    call), ``worker_sigstop`` (for ``duration`` s, longer than a lease), ``redis_restart``
    (empty), ``postgres_restart`` (immediate shutdown: a crash), ``provider_down`` (``target``
    refuses connections for ``duration`` s), ``mcp_server_kill`` (the MCP server's process
    SIGKILLed, calls in flight and all, and started again: the ``mcp`` harness only).
    """

    at: float
    kind: str
    target: str = ""
    duration: float = 0.0
    pick: int = 0


@dataclass(frozen=True)
class World:
    """The settings of the world and of the harness, shrunk so a run takes minutes: the same
    shapes as production (a timeout, a lease longer than any call, lookups that back off, keys
    that die, a search that lags), in seconds instead of minutes and hours."""

    tool_timeout: float = 1.0
    lease: float = 4.0
    reconcile: tuple[float, ...] = (0.5, 1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 5.0, 5.0, 8.0, 8.0, 10.0)
    transient_retries: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0, 8.0)
    key_lifetimes: dict[str, float] = field(
        default_factory=lambda: {"payments": 90.0, "mail": 90.0, "bookings": 90.0}
    )
    """How long each provider remembers a request's key. Longer than the last round of
    ``reconcile`` would retry (72.5 s here: ``agentops.W105`` stays quiet, as it does with
    real providers' day-long keys): a step recorded just before the plan's worst stretch of
    faults is still retried with its key when they end. Shorter keys give such a step to a
    person (``key_dead``), as designed, and the run would count a person asked unmeant; the
    journal's own tests kill keys on purpose."""
    search_lag: float = 1.5
    webhook: dict[str, Any] = field(default_factory=dict)
    hold_expiry: float = 900.0
    sweep_interval: float = 0.5
    sweep_grace: float = 1.0
    max_failed_runs: int = 5
    approval_ttl: float = 120.0
    mcp_wait: float = 2.0
    """How long an intent's call waits for its effect (``MCP_WAIT_SECONDS``, 10 s by default:
    twice the default tool timeout, as here)."""

    def env(self, harness: str) -> dict[str, str]:
        """The harness's settings (agentops/settings.py) for the workers, the web app and the
        MCP server.

        The Stripe library retries a request on its own (under one idempotency key) as many
        times as it is told: agentops tells it not to (``STRIPE_MAX_NETWORK_RETRIES``'s
        default, 0: the journal retries, after looking the effect up); the naive loop keeps
        the library's own default (``stripe.max_network_retries``, 2 in stripe 16), as
        code that does not set it does."""

        def seconds(values: tuple[float, ...]) -> str:
            return ",".join(f"{v:g}" for v in values)

        return {
            "TOOL_TIMEOUT_SECONDS": f"{self.tool_timeout:g}",
            "JOURNAL_LEASE_SECONDS": f"{self.lease:g}",
            "RECONCILE_SCHEDULE": seconds(self.reconcile),
            "TRANSIENT_RETRY_SCHEDULE": seconds(self.transient_retries),
            # The harness is told the truth about its providers: how long keys live, how far
            # search trails writes (a little more than it does).
            "STRIPE_KEY_LIFETIME_SECONDS": f"{self.key_lifetimes['payments']:g}",
            "MAIL_KEY_LIFETIME_SECONDS": f"{self.key_lifetimes['mail']:g}",
            "BOOKINGS_KEY_LIFETIME_SECONDS": f"{self.key_lifetimes['bookings']:g}",
            "STRIPE_SEARCH_LAG_SECONDS": f"{self.search_lag + 0.5:g}",
            "STRIPE_MAX_NETWORK_RETRIES": str(stripe.max_network_retries)
            if harness == "naive"
            else "0",
            "SWEEP_INTERVAL_SECONDS": f"{self.sweep_interval:g}",
            "SWEEP_GRACE_SECONDS": f"{self.sweep_grace:g}",
            "MAX_FAILED_RUNS": str(self.max_failed_runs),
            "APPROVAL_TTL_SECONDS": f"{self.approval_ttl:g}",
            "RUN_JOB_TIMEOUT_SECONDS": "120",
            "PLANNER": "scripted",
            "MCP_WAIT_SECONDS": f"{self.mcp_wait:g}",
            # The run's agents make a few thousand calls a minute: an operator gives an agent
            # fleet's clients a limit to match (the default, 120 a minute, is a person's).
            "API_RATE_LIMIT": "100000",
        }

    def driver_settings(self) -> dict[str, Any]:
        """The same settings for the run's own process, which starts tasks and approves held
        ones: a ring it makes (agentops.doorbell.task_ring) must hold the sweeper back no
        longer than the workers' rings do."""
        return {
            "SWEEP_GRACE_SECONDS": self.sweep_grace,
            "RUN_JOB_TIMEOUT_SECONDS": 120,
            "JOURNAL_LEASE_SECONDS": self.lease,
            "APPROVAL_TTL_SECONDS": self.approval_ttl,
        }

    @property
    def settle_budget(self) -> float:
        """How long after the faults stop a task may still need to settle: every lookup
        round, every transient retry, and a lease or two to be taken over."""
        return sum(self.reconcile) + sum(self.transient_retries) + 3 * self.lease


@dataclass(frozen=True)
class Plan:
    seed: int
    run: str
    tasks: list[TaskSpec]
    world: World
    rules: list[ProviderFault]
    events: list[Event]
    submit_over: float
    """Tasks are started evenly over this many seconds."""
    faults_until: float
    """Provider faults are cleared then; process faults all happen before."""
    full_hotels: list[str]
    model: Model
    """The model both harnesses' tasks are decided by (devtools.chaos.model)."""
    refusals: int = 0
    """Charges the payment provider refuses *us* for on purpose (421: a request it says is not
    for it): each task that meets one must end needing a person, and exactly these."""

    def submit_at(self, spec: TaskSpec) -> float:
        return self.submit_over * (spec.n - 1) / max(1, len(self.tasks))


# How often each fault hits the requests of an effect, and of a lookup. Every effect meets
# about one fault in five: far more than any real provider, on purpose.
EFFECT_FAULTS = (
    ("latency_before_effect", 0.04),  # the reply comes after the client gave up; effect late
    ("drop_after_effect", 0.04),  # the effect happened; the reply is lost
    ("error_500_before", 0.03),
    ("error_500_after", 0.03),
    ("conflict", 0.02),
    ("rate_limit", 0.02),
    ("reset_before_read", 0.02),
)
LOOKUP_FAULTS = (("error_500_before", 0.05), ("reset_before_read", 0.02))
# The fault that hands a task to a person on purpose (``refusals``): the provider refuses us,
# not the action, and only a person can put that right (journal.outcomes: misconfigured).
REFUSAL = ("payments", "payment_intents.create", "misdirected")
# What only the MCP harness meets: the invoice lookups its intents read the system of record
# with fail as the other lookups do, and the MCP server's process is killed mid-call. Drawn from
# dice of their own, so the other harnesses' plans are the same with or without them.
MCP_LOOKUPS = (("payments", "invoices.search"),)
OPERATIONS = {
    "payments": (
        ("payment_intents.create", EFFECT_FAULTS),
        ("refunds.create", EFFECT_FAULTS),
        ("payment_intents.search", LOOKUP_FAULTS),
        ("payment_intents.list", LOOKUP_FAULTS),
    ),
    "mail": (("messages.send", EFFECT_FAULTS), ("messages.list", LOOKUP_FAULTS)),
    "bookings": (
        ("flight_holds.create", EFFECT_FAULTS),
        ("hotel_bookings.create", EFFECT_FAULTS),
        ("flight_holds.release", EFFECT_FAULTS),
        ("hotel_bookings.cancel", EFFECT_FAULTS),
        ("flight_holds.list", LOOKUP_FAULTS),
        ("hotel_bookings.list", LOOKUP_FAULTS),
        ("flight_holds.retrieve", LOOKUP_FAULTS),
        ("hotel_bookings.retrieve", LOOKUP_FAULTS),
    ),
}
BOUNDARIES = ("before_call", "during_call", "after_call")
KILLABLE_TOOLS = ("charge_customer", "send_email", "hold_flight", "book_hotel")


def _renewal(r: random.Random, n: int, run: str) -> TaskSpec:
    refs: dict[str, Any] = {
        "invoice": f"INV-{run}-{n}",
        "amount": r.randint(5, 900) * 100,
        "email": f"customer{n}@example.com",
    }
    if r.random() < 0.1:
        refs["payment_method"] = "pm_card_chargeDeclined"
    return TaskSpec(n, "renewal", f"Renew subscription {refs['invoice']}", refs)


def _trip(r: random.Random, n: int, run: str, full: list[str]) -> TaskSpec:
    hotel = f"{r.choice(HOTELS)} {run}"
    if r.random() < 0.15:
        hotel = f"Full House {run}-{n}"
        full.append(hotel)
    day = r.randint(1, 27)
    refs = {
        "invoice": f"TRIP-{run}-{n}",
        "amount": r.randint(50, 4000) * 100,
        "email": f"traveller{n}@example.com",
        "flight": r.choice(FLIGHTS),
        "traveller": f"Traveller {run}-{n}",
        "hotel": hotel,
        "check_in": f"2027-03-{day:02d}",
        "check_out": f"2027-03-{day + 1:02d}",
    }
    decision = "approve" if r.random() < 0.8 else "reject"
    spec = TaskSpec(n, "trip", f"Book trip {refs['invoice']}", refs)
    return TaskSpec(n, "trip", spec.goal, refs, decision if spec.held else "")


def _reminders(r: random.Random, n: int, run: str, sent: list[dict[str, Any]]) -> TaskSpec:
    items = [
        {
            "invoice": f"INV-{run}-r{n}-{j}",
            "email": f"debtor{n}.{j}@example.com",
            "reminder": r.randint(1, 3),
        }
        for j in range(r.randint(2, 5))
    ]
    repeats = None
    if sent and r.random() < 0.3:
        # The reminder job ran twice: one earlier reminder is asked for again.
        earlier = r.choice(sent)
        items[0] = dict(earlier["item"])
        repeats = earlier["n"]
    sent.extend({"n": n, "item": item} for item in items)
    return TaskSpec(n, "reminders", f"Send reminders batch {n}", {"invoices": items}, "", repeats)


def _tasks(r: random.Random, count: int, run: str, full: list[str]) -> list[TaskSpec]:
    tasks: list[TaskSpec] = []
    reminded: list[dict[str, Any]] = []
    for n in range(1, count + 1):
        kind = r.choices(KINDS, KIND_WEIGHTS)[0]
        earlier = [t for t in tasks if t.kind == kind and t.repeats is None]
        if kind != "reminders" and earlier and r.random() < 0.08:
            # Asked for twice (a retried cron, a double click): the same refs again.
            first = r.choice(earlier)
            tasks.append(TaskSpec(n, kind, first.goal, dict(first.refs), first.decision, first.n))
        elif kind == "renewal":
            tasks.append(_renewal(r, n, run))
        elif kind == "trip":
            tasks.append(_trip(r, n, run, full))
        else:
            tasks.append(_reminders(r, n, run, reminded))
    return tasks


# The cluster run's faults (``--cluster``: PostgreSQL under Patroni, devtools.chaos.cluster),
# each a while after the last, so that the cluster has its synchronous standby back first:
# the primary killed (Patroni promotes the standby; the dead node rejoins), a switchover, the
# primary cut from the network (demoted, replaced; it rejoins once healed), Redis restarted
# empty, and a rolling deploy of the workers (each stopped warm and started as the next
# version).
CLUSTER_FAULTS = (
    "postgres_failover",
    "redis_restart",
    "postgres_switchover",
    "rolling_deploy",
    "postgres_isolate",
)
CLUSTER_SHORT = ("postgres_failover", "postgres_isolate")
"""The short run's (``make test``): one failover, one partition."""
CLUSTER_SPACING = 22.0
"""Seconds between two of them: a failover (Patroni's ttl) and the dead node's rejoining."""
CLUSTER_ISOLATE = 15.0
"""How long the primary is cut off: past Patroni's ttl, so it is demoted and replaced."""


def plan_make(
    *,
    seed: int,
    tasks: int,
    run: str,
    refusals: int = 0,
    cluster: bool = False,
    short: bool = False,
) -> Plan:
    """The plan of a run of ``tasks`` tasks for ``seed``; ``run`` only names its objects
    (invoices, travellers) apart from other runs' in the same database. ``refusals``: how
    many charges the payment provider refuses us for on purpose (the first ones it gets),
    each leaving its task to a person; 0 by default, so that a run whose faults are all
    recoverable must end with nobody asked. ``cluster``: the run's PostgreSQL is a Patroni
    cluster (devtools.chaos.cluster): the tasks are started over the time its faults
    (:data:`CLUSTER_FAULTS`) take, which replace the single PostgreSQL's crash; the rest of
    the plan is the same seed's; ``short``: only :data:`CLUSTER_SHORT`'s."""
    if tasks < 1:
        raise ValueError("a chaos run needs at least one task")
    if refusals < 0:
        raise ValueError("refusals: at least 0")
    r = random.Random(seed)  # noqa: S311 - a reproducible schedule, not a secret
    full: list[str] = []
    specs = _tasks(r, tasks, run, full)
    world = World(
        webhook={
            "webhook_delay": 0.5,
            "webhook_duplicate": 0.15,
            "webhook_reorder": True,
            "webhook_loss": 0.15,
            "webhook_seed": r.randrange(2**31),
        }
    )
    # The refusal first: the provider applies the first rule that fires.
    rules = [ProviderFault(*REFUSAL, 1.0, seed=0, times=refusals)] if refusals else []
    rules += [
        ProviderFault(
            provider,
            operation,
            fault,
            probability,
            seed=r.randrange(2**31),
            delay=world.tool_timeout + r.uniform(0.3, 1.5) if "latency" in fault else 0.0,
        )
        for provider, operations in OPERATIONS.items()
        for operation, faults in operations
        for fault, probability in faults
    ]
    submit_over = max(8.0, tasks / 5.0)
    faults_until = old_until = submit_over + 10.0

    def moment() -> float:
        return round(r.uniform(2.0, faults_until - 2.0), 2)

    events = [
        Event(moment(), "worker_sigkill", pick=r.randrange(1000))
        for _ in range(max(2, tasks // 50))
    ]
    events += [
        Event(
            moment(),
            "worker_sigkill",
            target=f"{r.choice(BOUNDARIES)}:{r.choice(KILLABLE_TOOLS)}",
            pick=r.randrange(1000),
        )
        for _ in range(max(1, tasks // 100))
    ]
    events += [
        Event(
            moment(),
            "worker_sigstop",
            duration=round(world.lease + r.uniform(1.0, 3.0), 2),
            pick=r.randrange(1000),
        )
        for _ in range(max(1, tasks // 150))
    ]
    if cluster:
        # Its own draws (the other events' moments are the same seed's as without), and the
        # tasks started over the whole of it, so that every fault finds some in flight.
        c = random.Random(f"{seed}:cluster")  # noqa: S311 - reproducible, as above
        first = 6.0
        kinds = CLUSTER_SHORT if short else CLUSTER_FAULTS
        submit_over = max(submit_over, first + CLUSTER_SPACING * len(kinds))
        faults_until = submit_over + 10.0
        events = [replace(e, at=round(e.at * faults_until / old_until, 2)) for e in events]
        for i, kind in enumerate(kinds):
            at = round(first + CLUSTER_SPACING * i + c.uniform(0.0, 3.0), 2)
            duration = CLUSTER_ISOLATE if kind == "postgres_isolate" else 0.0
            events.append(Event(at, kind, duration=duration))
    else:
        events += [Event(moment(), "redis_restart") for _ in range(max(1, tasks // 300))]
        events += [Event(moment(), "postgres_restart") for _ in range(max(1, tasks // 300))]
    events += [
        Event(moment(), "provider_down", target=provider, duration=round(r.uniform(1.5, 4.0), 2))
        for provider in OPERATIONS
    ]
    mcp = random.Random(f"{seed}:mcp")  # noqa: S311 - reproducible, as above
    rules += [
        ProviderFault(provider, operation, fault, probability, seed=mcp.randrange(2**31))
        for provider, operation in MCP_LOOKUPS
        for fault, probability in LOOKUP_FAULTS
    ]
    events += [
        Event(round(mcp.uniform(2.0, faults_until - 2.0), 2), "mcp_server_kill")
        for _ in range(max(1, tasks // 100))
    ]
    events.sort(key=lambda e: (e.at, e.kind))
    return Plan(
        seed=seed,
        run=run,
        tasks=specs,
        world=world,
        rules=rules,
        events=events,
        submit_over=submit_over,
        faults_until=faults_until,
        full_hotels=full,
        model=Model(seed=seed),
        refusals=refusals,
    )
