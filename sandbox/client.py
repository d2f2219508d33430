"""A tiny stdlib client for the sandbox admin API (``/_sandbox/...``)."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

JSON = dict[str, Any]


class SandboxError(Exception):
    def __init__(self, status: int, body: Any) -> None:
        super().__init__(f"sandbox admin call failed: {status} {body!r}")
        self.status = status
        self.body = body


class SandboxClient:
    def __init__(self, base_url: str, timeout: float = 5.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout

    def _call(self, method: str, path: str, body: JSON | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(  # noqa: S310 - the sandbox's own http URL
            self.base_url + path,
            data=data,
            method=method,
            headers={"Content-Type": "application/json"} if data is not None else {},
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:  # noqa: S310
                return json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                parsed: Any = json.loads(raw)
            except ValueError:
                parsed = raw.decode(errors="replace")
            raise SandboxError(exc.code, parsed) from exc

    def health(self) -> bool:
        try:
            self._call("GET", "/_sandbox/health")
        except (OSError, SandboxError):
            return False
        return True

    def about(self) -> JSON:
        """The health answer: ``provider``, ``boot_id`` (new with every process: a restart
        shows as a new one), ``started_at``, ``retain_seconds`` and ``retained_since`` (what
        it may still show), and ``held`` (how many objects, ledger entries and keys)."""
        answer: JSON = self._call("GET", "/_sandbox/health")
        return answer

    def forget(self, object_id: str) -> None:
        """Have the provider no longer show an object (its lists and retrieve), as a provider
        that lost it would; the ledger keeps the request that made it."""
        self._call("POST", "/_sandbox/forget", {"id": object_id})

    def refund_from_dashboard(self, payment_intent: str, amount: int | None = None) -> JSON:
        """A refund a person makes in the provider's dashboard: no key, no metadata of ours
        (payments only)."""
        body: JSON = {"payment_intent": payment_intent}
        if amount is not None:
            body["amount"] = amount
        made: JSON = self._call("POST", "/_sandbox/refunds", body)
        return made

    def fault(self, operation: str, fault: str, **opts: Any) -> JSON:
        """Inject ``fault`` for ``operation`` (``*`` = any). Options: delay, times
        (default 1, None = every time), probability, seed."""
        spec: JSON = {"operation": operation, "fault": fault, **opts}
        result: JSON = self._call("POST", "/_sandbox/faults", spec)
        return result

    def fault_log(self) -> list[JSON]:
        """Every fault as it was applied: ``at`` (epoch s), ``fault``, ``operation``, ``key``."""
        result: list[JSON] = self._call("GET", "/_sandbox/fault_log")["data"]
        return result

    def faults(self) -> list[JSON]:
        result: list[JSON] = self._call("GET", "/_sandbox/faults")["data"]
        return result

    def clear_faults(self) -> None:
        self._call("DELETE", "/_sandbox/faults")

    def ledger(
        self, key: str | None = None, reference: str | None = None, operation: str | None = None
    ) -> list[JSON]:
        query = {
            k: v
            for k, v in (("key", key), ("reference", reference), ("operation", operation))
            if v is not None
        }
        path = "/_sandbox/ledger"
        if query:
            path += "?" + urllib.parse.urlencode(query)
        result: list[JSON] = self._call("GET", path)["data"]
        return result

    def config(self, **settings: Any) -> JSON:
        """Change settings (no arguments: read them)."""
        if not settings:
            got: JSON = self._call("GET", "/_sandbox/config")["config"]
            return got
        changed: JSON = self._call("POST", "/_sandbox/config", settings)["config"]
        return changed

    def reset(self) -> None:
        self._call("POST", "/_sandbox/reset", {})

    def invoice(self, **fields: Any) -> JSON:
        """Put an invoice in the payments sandbox's record: ``number``, ``amount_due``,
        ``currency``, ``customer_email``, ``customer``, ``status``, ``lines`` (payments only)."""
        made: JSON = self._call("POST", "/_sandbox/invoices", fields)
        return made

    def deliveries(self) -> list[JSON]:
        """Webhook delivery attempts (payments only)."""
        result: list[JSON] = self._call("GET", "/_sandbox/deliveries")["data"]
        return result
