"""A mail-sending sandbox: ``POST /v1/messages`` with an ``Idempotency-Key`` header, the
caller's own message id kept and searchable; messages listed by ``message_id``, ``to`` and
``created`` window, a page at a time when a ``limit`` is given.

Run: ``python -m sandbox.mail --port PORT [--key-lifetime S]``.
"""

from __future__ import annotations

import copy
import re
import time

from sandbox.provider import Provider, list_window, prune_made_before
from sandbox.server import base_arg_parser, serve
from sandbox.wire import JSON, Request, invalid, missing, new_id

_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")


class Mail(Provider):
    name = "mail"

    def __init__(self, *, key_lifetime: float = 86400.0) -> None:
        super().__init__(key_lifetime=key_lifetime)
        self.messages: dict[str, JSON] = {}
        self.route("POST", "/v1/messages", self.send, "messages.send")
        self.route("GET", "/v1/messages", self.list_messages, "messages.list")
        self.route("GET", "/v1/messages/{id}", self.retrieve, "messages.retrieve")

    def reset_objects(self) -> None:
        self.messages.clear()

    def forget(self, object_id: str) -> bool:
        return self.messages.pop(object_id, None) is not None

    def prune_objects(self, before: float) -> None:
        prune_made_before(self.messages, before)

    def held(self) -> JSON:
        return {**super().held(), "messages": len(self.messages)}

    def send(self, request: Request) -> JSON:
        p = request.params
        for name in ("to", "subject", "body", "message_id"):
            value = p.get(name)
            if value is None or value == "":
                raise invalid(f"Missing required param: {name}.", name)
            if not isinstance(value, str):
                raise invalid(f"{name} must be a string.", name)
        if not _EMAIL.match(p["to"]):
            raise invalid(f"Invalid email address: {p['to']!r}.", "to")
        message: JSON = {
            "id": new_id("msg_"),
            "object": "message",
            "message_id": p["message_id"],
            "to": p["to"],
            "subject": p["subject"],
            "body": p["body"],
            "headers": p.get("headers") if isinstance(p.get("headers"), dict) else {},
            "status": "sent",
            "created": int(time.time()),
        }
        with self.lock:
            self.messages[message["id"]] = message
            self.record("messages.send", request, p["message_id"], message["id"])
            return copy.deepcopy(message)

    def list_messages(self, request: Request) -> JSON:
        wanted = request.params.get("message_id")
        to = request.params.get("to")
        with self.lock:
            data = [
                copy.deepcopy(m)
                for m in self.messages.values()
                if (wanted is None or m["message_id"] == wanted) and (to is None or m["to"] == to)
            ]
        data.sort(key=lambda m: (m["created"], m["id"]))
        return list_window(request.params, data, "/v1/messages")

    def retrieve(self, request: Request) -> JSON:
        msg_id = request.route_params["id"]
        with self.lock:
            message = self.messages.get(msg_id)
            if message is None:
                raise missing("message", msg_id)
            return copy.deepcopy(message)


def main() -> None:
    args = base_arg_parser("python -m sandbox.mail").parse_args()
    serve(Mail(key_lifetime=args.key_lifetime), args.port, retain_seconds=args.retain_seconds)


if __name__ == "__main__":
    main()
