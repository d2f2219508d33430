"""The common provider: an HTTP JSON API with an idempotency-key header and a lookup.

Most tools are data, not code: an :class:`HttpTool` names its provider's address (a
setting), the path it posts to, where the step's key goes so the effect can be found again,
and how to find it (a list filtered by that reference, or the object the call acted on).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from agentops.effects._http import http_call
from agentops.effects._tool import Tool, tool_setting
from journal.outcomes import Observation, Outcome, Reply
from journal.protocols import CostClass


class HttpTool(Tool):
    """A tool of an HTTP JSON provider.

    - ``base_setting``: the setting that holds the provider's address (a sandbox in tests
      and the demo, the real provider in production: the same code).
    - ``api_key_setting``: the setting that holds its key, sent as a bearer token.
    - ``method``, ``path``: the call. ``{name}`` in the path is the argument ``name`` (the
      object the call acts on: ``/v1/holds/{hold}/release``); the other arguments are the
      JSON body (``body_args``).
    - ``key_header``: the header the provider reads the idempotency key from.
    - ``key_field``: the body field our key also goes in, so the effect carries it and can be
      found by it later (a "client reference"). Without one, a call whose reply was lost
      could never be told from one that never arrived.
    - ``lookup_path``: how the effect is found again. Without ``{…}``, a list filtered by
      ``key_field`` (``GET /v1/holds?reference=<key>``, items under ``lookup_list``); with
      ``{name}``, the object the call acted on, which shows the effect when it has the values
      of ``done_when`` (``{"status": "released"}``).
    - ``evidence_fields``: the answer's field behind each evidence name, when they differ
      (``{"message": "id"}``); ``keep``: more of the answer kept beside the evidence.
    """

    base_setting: ClassVar[str]
    default_base: ClassVar[str] = ""
    """The provider's own address, used when the setting is empty (Stripe's, for a tool of
    the real Stripe): then an empty setting means "the real one", not "not configured"."""
    api_key_setting: ClassVar[str] = ""
    method: ClassVar[str] = "POST"
    path: ClassVar[str]
    body_args: ClassVar[bool] = True
    key_header: ClassVar[str] = "Idempotency-Key"
    key_field: ClassVar[str | None] = None
    lookup_path: ClassVar[str | None] = None
    lookup_list: ClassVar[str] = "data"
    done_when: ClassVar[Mapping[str, Any]] = {}
    evidence_fields: ClassVar[Mapping[str, str]] = {}
    keep: ClassVar[tuple[str, ...]] = ()

    @property
    def looks_up(self) -> bool:
        return self.lookup_path is not None

    # -- the call ------------------------------------------------------------------------

    def url(self, path: str, args: Mapping[str, Any]) -> str:
        base = str(tool_setting(self.base_setting, "") or self.default_base).rstrip("/")
        return base + path.format(**{k: v for k, v in args.items() if isinstance(v, str)})

    def body(self, args: Mapping[str, Any], *, key: str) -> dict[str, Any]:
        """The JSON body: the arguments the path does not name, and our key as reference."""
        if not self.body_args:
            return {}
        named = {part.split("}")[0] for part in self.path.split("{")[1:]}
        body = {k: v for k, v in args.items() if k not in named}
        if self.key_field:
            body[self.key_field] = key
        return body

    def evidence_of(self, answer: Mapping[str, Any]) -> dict[str, Any]:
        """The evidence (and what ``keep`` names) from the provider's object."""
        found = {name: answer.get(self.evidence_fields.get(name, name)) for name in self.evidence}
        found.update({name: answer[name] for name in self.keep if name in answer})
        return found

    def _api_key(self) -> str:
        return str(tool_setting(self.api_key_setting, "")) if self.api_key_setting else ""

    def call(self, args: Mapping[str, Any], *, key: str) -> Observation:
        # A GET sends its arguments as the query, and no body; a read has no effect to name,
        # so it sends no key either (it is retried plainly, never looked up).
        get = self.method == "GET"
        sent = self.body(args, key=key)
        seen = http_call(
            self.method,
            self.url(self.path, args),
            key=None if self.cost == CostClass.READ else key,
            key_header=self.key_header,
            timeout=self.timeout,
            api_key=self._api_key(),
            json=None if get else sent,
            params=(sent or None) if get else None,
        )
        if isinstance(seen, Reply) and seen.status < 300:
            return Reply(seen.status, evidence=self.evidence_of(seen.evidence))
        return seen

    # -- finding it again ----------------------------------------------------------------

    def fetch(self, path: str, args: Mapping[str, Any], **params: Any) -> dict[str, Any]:
        """``GET path`` at the provider; raises when it cannot be asked (a lookup that
        cannot tell is never a "no")."""
        seen = http_call(
            "GET",
            self.url(path, args),
            key=None,
            timeout=self.timeout,
            api_key=self._api_key(),
            params=params or None,
        )
        if not isinstance(seen, Reply) or seen.status >= 300:
            raise LookupError(f"{self.name}: the provider could not be asked: {seen}")
        return dict(seen.evidence)

    def lookup_query(self, args: Mapping[str, Any], *, key: str) -> dict[str, Any]:
        """The query that lists effects carrying ``key``."""
        return {self.key_field: key} if self.key_field else {}

    def matches(self, found: Mapping[str, Any], *, key: str) -> bool:
        """Whether an object the lookup listed is the effect of the step keyed ``key``."""
        return self.key_field is not None and found.get(self.key_field) == key

    def lookup(self, args: Mapping[str, Any], *, key: str) -> Outcome | None:
        if self.lookup_path is None:
            raise LookupError(f"{self.name} declares no lookup")
        if "{" in self.lookup_path:
            # The object the call acted on: our action landed iff the object shows it.
            acted_on = self.fetch(self.lookup_path, args)
            done = all(acted_on.get(k) == v for k, v in self.done_when.items())
            return Outcome.done(self.evidence_of(acted_on)) if done else None
        listed = self.fetch(self.lookup_path, args, **self.lookup_query(args, key=key))
        items = listed.get(self.lookup_list, [])
        mine = [o for o in items if isinstance(o, Mapping) and self.matches(o, key=key)]
        # An object carrying our key is our effect, whatever became of it since (a hold
        # that expired or was released was still made).
        return Outcome.done(self.evidence_of(mine[0])) if mine else None
