"""Travel bookings through the bookings provider's HTTP API: flight holds and hotels.

Each effect carries the step's key as its ``reference`` (and ``Idempotency-Key``), so it can
be found by reference; each has a compensation (release the hold, cancel the booking).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any, ClassVar

from django.conf import settings

from agentops.tools.base import NO_CONTROL, SchemaTool, http_call
from journal.outcomes import Observation, Outcome, Reply


class BookingTool(SchemaTool):
    """A bookings-API call: create by POST with our reference, or act on an object by id."""

    evidence = ("id",)  # the provider's id for the hold or booking acted on
    collection: ClassVar[str]
    action: ClassVar[str] = ""  # "" creates; otherwise POST /{collection}/{id}/{action}
    id_arg: ClassVar[str] = ""
    done_status: ClassVar[str]

    def __init__(self) -> None:
        self.key_lifetime = timedelta(seconds=settings.BOOKINGS_KEY_LIFETIME_SECONDS)

    def _url(self, args: Mapping[str, Any]) -> str:
        base = f"{settings.BOOKINGS_API_BASE}/v1/{self.collection}"
        return f"{base}/{args[self.id_arg]}/{self.action}" if self.action else base

    def call(self, args: Mapping[str, Any], *, key: str) -> Observation:
        body = {} if self.action else {**args, "reference": key}
        seen = http_call(
            "POST",
            self._url(args),
            key=key,
            timeout=self.timeout,
            api_key=settings.BOOKINGS_API_KEY,
            json=body,
        )
        if isinstance(seen, Reply) and seen.status < 300:
            return Reply(seen.status, evidence=_evidence(seen.evidence))
        return seen

    def current(self, object_id: str) -> dict[str, Any]:
        """The object as the provider has it now; raises when it cannot be asked."""
        seen = http_call(
            "GET",
            f"{settings.BOOKINGS_API_BASE}/v1/{self.collection}/{object_id}",
            key=None,
            timeout=self.timeout,
            api_key=settings.BOOKINGS_API_KEY,
        )
        if not isinstance(seen, Reply) or seen.status >= 300:
            raise LookupError(f"the bookings provider could not be asked: {seen}")
        return dict(seen.evidence)

    def lookup(self, args: Mapping[str, Any], *, key: str) -> Outcome | None:
        if self.action:
            # Acting on an existing object: our action landed iff the object shows it.
            acted_on = self.current(args[self.id_arg])
            done = acted_on.get("status") == self.done_status
            return Outcome.done(_evidence(acted_on)) if done else None
        seen = http_call(
            "GET",
            f"{settings.BOOKINGS_API_BASE}/v1/{self.collection}",
            key=None,
            timeout=self.timeout,
            api_key=settings.BOOKINGS_API_KEY,
            params={"reference": key},
        )
        if not isinstance(seen, Reply) or seen.status >= 300:
            raise LookupError(f"the bookings provider could not be asked: {seen}")
        # Creating: an object carrying our reference is our effect, whatever became of it
        # since (a hold that has expired or been released was still made).
        mine = [o for o in seen.evidence.get("data", []) if o.get("reference") == key]
        return Outcome.done(_evidence(mine[0])) if mine else None


def _evidence(obj: Mapping[str, Any]) -> dict[str, Any]:
    return {k: obj.get(k) for k in ("id", "status", "reference", "expires_at") if k in obj}


class HoldFlight(BookingTool):
    name = "hold_flight"
    description = "Hold a seat on a flight for a passenger (released by release_flight)."
    schema = {
        "type": "object",
        "properties": {
            "flight": {"type": "string", "minLength": 2, "maxLength": 20, **NO_CONTROL},
            "passenger": {"type": "string", "minLength": 1, "maxLength": 200, **NO_CONTROL},
        },
        "required": ["flight", "passenger"],
        "additionalProperties": False,
    }
    collection = "flight_holds"
    done_status = "held"
    compensation = "release_flight"

    def guard(self, args: Mapping[str, Any]) -> str | None:
        return f"flight:{args['flight']}:{args['passenger']}"

    def once(self, args: Mapping[str, Any]) -> bool:
        return True  # one seat per passenger and flight, until it is released

    def undo_args(self, args: Mapping[str, Any], evidence: Mapping[str, Any]) -> dict[str, Any]:
        return {"hold": evidence["id"]}

    def standing(self, args: Mapping[str, Any], evidence: Mapping[str, Any]) -> bool | None:
        # A hold expires at the provider on its own: ask before building on it.
        return self.current(evidence["id"]).get("status") == "held"


class ReleaseFlight(BookingTool):
    name = "release_flight"
    description = "Release a flight hold."
    schema = {
        "type": "object",
        "properties": {"hold": {"type": "string", "pattern": "^fh_"}},
        "required": ["hold"],
        "additionalProperties": False,
    }
    collection = "flight_holds"
    action = "release"
    id_arg = "hold"
    done_status = "released"

    def guard(self, args: Mapping[str, Any]) -> str | None:
        return f"release:{args['hold']}"

    def once(self, args: Mapping[str, Any]) -> bool:
        return True


class BookHotel(BookingTool):
    name = "book_hotel"
    description = "Book a hotel room (cancelled by cancel_hotel)."
    schema = {
        "type": "object",
        "properties": {
            "hotel": {"type": "string", "minLength": 1, "maxLength": 200, **NO_CONTROL},
            "guest": {"type": "string", "minLength": 1, "maxLength": 200, **NO_CONTROL},
            "check_in": {"type": "string", "format": "date"},
            "check_out": {"type": "string", "format": "date"},
        },
        "required": ["hotel", "guest", "check_in", "check_out"],
        "additionalProperties": False,
    }
    collection = "hotel_bookings"
    done_status = "booked"
    compensation = "cancel_hotel"

    def guard(self, args: Mapping[str, Any]) -> str | None:
        return f"hotel:{args['hotel']}:{args['guest']}:{args['check_in']}"

    def once(self, args: Mapping[str, Any]) -> bool:
        return True  # one room per guest, hotel and night, until it is cancelled

    def undo_args(self, args: Mapping[str, Any], evidence: Mapping[str, Any]) -> dict[str, Any]:
        return {"booking": evidence["id"]}

    def standing(self, args: Mapping[str, Any], evidence: Mapping[str, Any]) -> bool | None:
        return self.current(evidence["id"]).get("status") == "booked"


class CancelHotel(BookingTool):
    name = "cancel_hotel"
    description = "Cancel a hotel booking."
    schema = {
        "type": "object",
        "properties": {"booking": {"type": "string", "pattern": "^hb_"}},
        "required": ["booking"],
        "additionalProperties": False,
    }
    collection = "hotel_bookings"
    action = "cancel"
    id_arg = "booking"
    done_status = "cancelled"

    def guard(self, args: Mapping[str, Any]) -> str | None:
        return f"cancel:{args['booking']}"

    def once(self, args: Mapping[str, Any]) -> bool:
        return True
