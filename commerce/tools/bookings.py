"""Travel bookings through the bookings provider's HTTP API: flight holds and hotels.

Declared, not coded (``agentops.effects.HttpTool``): each effect carries the step's key as
its ``reference`` (and ``Idempotency-Key``), so it can be found by reference; each has a
compensation (release the hold, cancel the booking), made on the object by its id.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from agentops.effects import NO_CONTROL, HttpTool


class Booking(HttpTool):
    """A bookings-API call: create by POST with our reference, or act on an object by id."""

    base_setting = "BOOKINGS_API_BASE"
    api_key_setting = "BOOKINGS_API_KEY"
    key_lifetime_setting = "BOOKINGS_KEY_LIFETIME_SECONDS"
    evidence = ("id",)
    keep = ("status", "reference", "expires_at")
    collection: ClassVar[str]

    def standing_status(self, evidence: Mapping[str, Any]) -> str:
        """The object's status at the provider now; raises when it cannot be asked."""
        return str(self.fetch(f"/v1/{self.collection}/{evidence['id']}", {}).get("status"))


class HoldFlight(Booking):
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
    path = "/v1/flight_holds"
    key_field = "reference"
    lookup_path = "/v1/flight_holds"
    compensation = "release_flight"

    def guard(self, args: Mapping[str, Any]) -> str | None:
        return f"flight:{args['flight']}:{args['passenger']}"

    def once(self, args: Mapping[str, Any]) -> bool:
        return True  # one seat per passenger and flight, until it is released

    def undo_args(self, args: Mapping[str, Any], evidence: Mapping[str, Any]) -> dict[str, Any]:
        return {"hold": evidence["id"]}

    def standing(self, args: Mapping[str, Any], evidence: Mapping[str, Any]) -> bool | None:
        # A hold expires at the provider on its own: ask before building on it.
        return self.standing_status(evidence) == "held"


class ReleaseFlight(Booking):
    name = "release_flight"
    description = "Release a flight hold."
    schema = {
        "type": "object",
        "properties": {"hold": {"type": "string", "pattern": "^fh_"}},
        "required": ["hold"],
        "additionalProperties": False,
    }
    collection = "flight_holds"
    path = "/v1/flight_holds/{hold}/release"
    body_args = False
    lookup_path = "/v1/flight_holds/{hold}"
    done_when = {"status": "released"}

    def guard(self, args: Mapping[str, Any]) -> str | None:
        return f"release:{args['hold']}"

    def once(self, args: Mapping[str, Any]) -> bool:
        return True


class BookHotel(Booking):
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
    path = "/v1/hotel_bookings"
    key_field = "reference"
    lookup_path = "/v1/hotel_bookings"
    compensation = "cancel_hotel"

    def guard(self, args: Mapping[str, Any]) -> str | None:
        return f"hotel:{args['hotel']}:{args['guest']}:{args['check_in']}"

    def once(self, args: Mapping[str, Any]) -> bool:
        return True  # one room per guest, hotel and night, until it is cancelled

    def undo_args(self, args: Mapping[str, Any], evidence: Mapping[str, Any]) -> dict[str, Any]:
        return {"booking": evidence["id"]}

    def standing(self, args: Mapping[str, Any], evidence: Mapping[str, Any]) -> bool | None:
        return self.standing_status(evidence) == "booked"


class CancelHotel(Booking):
    name = "cancel_hotel"
    description = "Cancel a hotel booking."
    schema = {
        "type": "object",
        "properties": {"booking": {"type": "string", "pattern": "^hb_"}},
        "required": ["booking"],
        "additionalProperties": False,
    }
    collection = "hotel_bookings"
    path = "/v1/hotel_bookings/{booking}/cancel"
    body_args = False
    lookup_path = "/v1/hotel_bookings/{booking}"
    done_when = {"status": "cancelled"}

    def guard(self, args: Mapping[str, Any]) -> str | None:
        return f"cancel:{args['booking']}"

    def once(self, args: Mapping[str, Any]) -> bool:
        return True
