"""A bookings sandbox: flight holds (hold / release, expiring) and hotel bookings
(book / cancel), each carrying the caller's reference; listed by ``reference``, ``status`` and
``created`` window, a page at a time when a ``limit`` is given.

Run: ``python -m sandbox.bookings --port PORT [--key-lifetime S] [--hold-expiry S]``.
"""

from __future__ import annotations

import copy
import datetime as dt
import time
from typing import Any

from sandbox.provider import Provider, list_window, prune_made_before
from sandbox.server import base_arg_parser, serve
from sandbox.wire import JSON, ApiError, Request, invalid, missing, new_id


def _required_str(params: JSON, name: str) -> str:
    value = params.get(name)
    if value is None or value == "":
        raise invalid(f"Missing required param: {name}.", name)
    if not isinstance(value, str):
        raise invalid(f"{name} must be a string.", name)
    return value


def _date(params: JSON, name: str) -> dt.date:
    raw = _required_str(params, name)
    try:
        return dt.date.fromisoformat(raw)
    except ValueError as exc:
        raise invalid(f"{name} must be an ISO date (YYYY-MM-DD).", name) from exc


class Bookings(Provider):
    name = "bookings"

    def __init__(self, *, key_lifetime: float = 86400.0, hold_expiry: float = 900.0) -> None:
        super().__init__(key_lifetime=key_lifetime)
        self.config["hold_expiry"] = hold_expiry
        # Hotels with no room left: booking one is refused (422 no_availability).
        self.config["full_hotels"] = []
        self.holds: dict[str, JSON] = {}
        self.hotels: dict[str, JSON] = {}
        self.route("POST", "/v1/flight_holds", self.create_hold, "flight_holds.create")
        self.route("GET", "/v1/flight_holds", self.list_holds, "flight_holds.list")
        self.route("GET", "/v1/flight_holds/{id}", self.retrieve_hold, "flight_holds.retrieve")
        self.route(
            "POST", "/v1/flight_holds/{id}/release", self.release_hold, "flight_holds.release"
        )
        self.route("POST", "/v1/hotel_bookings", self.book_hotel, "hotel_bookings.create")
        self.route("GET", "/v1/hotel_bookings", self.list_hotels, "hotel_bookings.list")
        self.route("GET", "/v1/hotel_bookings/{id}", self.retrieve_hotel, "hotel_bookings.retrieve")
        self.route(
            "POST", "/v1/hotel_bookings/{id}/cancel", self.cancel_hotel, "hotel_bookings.cancel"
        )

    def apply_config(self, changes: JSON) -> None:
        if "hold_expiry" in changes:
            changes["hold_expiry"] = float(changes["hold_expiry"])
        if "full_hotels" in changes:
            full = changes["full_hotels"]
            if not isinstance(full, list) or not all(isinstance(h, str) for h in full):
                raise invalid("full_hotels must be a list of hotel names.", "full_hotels")
        super().apply_config(changes)

    def prune_objects(self, before: float) -> None:
        prune_made_before(self.holds, before)
        prune_made_before(self.hotels, before)

    def held(self) -> JSON:
        return {**super().held(), "holds": len(self.holds), "bookings": len(self.hotels)}

    def reset_objects(self) -> None:
        self.holds.clear()
        self.hotels.clear()

    def forget(self, object_id: str) -> bool:
        return (
            self.holds.pop(object_id, None) is not None
            or self.hotels.pop(object_id, None) is not None
        )

    def _refresh(self, hold: JSON) -> JSON:
        """Expire a hold whose time has passed (caller holds the lock)."""
        if hold["status"] == "held" and time.time() >= hold["expires_at"]:
            hold["status"] = "expired"
        return hold

    # ------------------------------------------------------------------ flights

    def create_hold(self, request: Request) -> JSON:
        p = request.params
        flight = _required_str(p, "flight")
        passenger = _required_str(p, "passenger")
        reference = _required_str(p, "reference")
        now = time.time()
        with self.lock:
            hold: JSON = {
                "id": new_id("fh_"),
                "object": "flight_hold",
                "flight": flight,
                "passenger": passenger,
                "reference": reference,
                "status": "held",
                "created": now,
                "expires_at": now + float(self.config["hold_expiry"]),
                "released_at": None,
            }
            self.holds[hold["id"]] = hold
            self.record("flight_holds.create", request, reference, hold["id"])
            return copy.deepcopy(hold)

    def _hold(self, request: Request) -> JSON:
        hold_id = request.route_params["id"]
        hold = self.holds.get(hold_id)
        if hold is None:
            raise missing("flight_hold", hold_id)
        return self._refresh(hold)

    def retrieve_hold(self, request: Request) -> JSON:
        with self.lock:
            return copy.deepcopy(self._hold(request))

    def release_hold(self, request: Request) -> JSON:
        with self.lock:
            hold = self._hold(request)
            if hold["status"] == "held":
                hold["status"] = "released"
                hold["released_at"] = time.time()
                self.record("flight_holds.release", request, hold["reference"], hold["id"])
            # released or expired: nothing is held any more; releasing again is a no-op
            return copy.deepcopy(hold)

    def list_holds(self, request: Request) -> JSON:
        return self._list(request, self.holds, refresh=True)

    # ------------------------------------------------------------------ hotels

    def book_hotel(self, request: Request) -> JSON:
        p = request.params
        hotel = _required_str(p, "hotel")
        guest = _required_str(p, "guest")
        reference = _required_str(p, "reference")
        check_in = _date(p, "check_in")
        check_out = _date(p, "check_out")
        if check_out <= check_in:
            raise invalid("check_out must be after check_in.", "check_out")
        if hotel in self.config["full_hotels"]:
            raise ApiError(
                422, "booking_error", f"{hotel} has no room left.", code="no_availability"
            )
        with self.lock:
            booking: JSON = {
                "id": new_id("hb_"),
                "object": "hotel_booking",
                "hotel": hotel,
                "guest": guest,
                "check_in": check_in.isoformat(),
                "check_out": check_out.isoformat(),
                "reference": reference,
                "status": "booked",
                "created": time.time(),
                "cancelled_at": None,
            }
            self.hotels[booking["id"]] = booking
            self.record("hotel_bookings.create", request, reference, booking["id"])
            return copy.deepcopy(booking)

    def _booking(self, request: Request) -> JSON:
        booking_id = request.route_params["id"]
        booking = self.hotels.get(booking_id)
        if booking is None:
            raise missing("hotel_booking", booking_id)
        return booking

    def retrieve_hotel(self, request: Request) -> JSON:
        with self.lock:
            return copy.deepcopy(self._booking(request))

    def cancel_hotel(self, request: Request) -> JSON:
        with self.lock:
            booking = self._booking(request)
            if booking["status"] == "booked":
                booking["status"] = "cancelled"
                booking["cancelled_at"] = time.time()
                self.record("hotel_bookings.cancel", request, booking["reference"], booking["id"])
            return copy.deepcopy(booking)

    def list_hotels(self, request: Request) -> JSON:
        return self._list(request, self.hotels, refresh=False)

    def _list(self, request: Request, objects: dict[str, JSON], *, refresh: bool) -> JSON:
        reference = request.params.get("reference")
        status = request.params.get("status")
        with self.lock:
            data: list[Any] = []
            for obj in objects.values():
                if refresh:
                    self._refresh(obj)
                if (reference is None or obj["reference"] == reference) and (
                    status is None or obj["status"] == status
                ):
                    data.append(copy.deepcopy(obj))
        data.sort(key=lambda o: (o["created"], o["id"]))
        url = "/v1/flight_holds" if objects is self.holds else "/v1/hotel_bookings"
        return list_window(request.params, data, url)


def main() -> None:
    parser = base_arg_parser("python -m sandbox.bookings")
    parser.add_argument("--hold-expiry", type=float, default=900.0, help="hold lifetime, s")
    args = parser.parse_args()
    serve(
        Bookings(key_lifetime=args.key_lifetime, hold_expiry=args.hold_expiry),
        args.port,
        retain_seconds=args.retain_seconds,
    )


if __name__ == "__main__":
    main()
