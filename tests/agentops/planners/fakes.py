"""Small local stand-ins for the model APIs: scripted answers in the real response shapes.

Each server answers every POST with the next scripted response (a JSON body, or a status
and a body) and records what the SDK sent: path, headers and JSON body. Nothing here ever
talks to a real service.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_ids = itertools.count(1)


@dataclass
class Request:
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class FakeModelServer:
    """A JSON API on 127.0.0.1 (a free port) answering from ``script`` in order."""

    script: list[Any] = field(default_factory=list)
    requests: list[Request] = field(default_factory=list)
    url: str = ""

    def __post_init__(self) -> None:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = raw.decode(errors="replace")
                fake.requests.append(
                    Request(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                )
                status, answer = 500, {"error": {"type": "api_error", "message": "no script"}}
                if fake.script:
                    item = fake.script.pop(0)
                    status, answer = item if isinstance(item, tuple) else (200, item)
                data = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                # The SDKs would otherwise retry a scripted 5xx: one answer per request here.
                self.send_header("x-should-retry", "false")
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    @property
    def bodies(self) -> list[Any]:
        return [r.body for r in self.requests]


def serve(*script: Any) -> Iterator[FakeModelServer]:
    server = FakeModelServer(list(script))
    try:
        yield server
    finally:
        server.close()


# --- Anthropic Messages API -----------------------------------------------------------------


def anthropic_message(content: list[dict[str, Any]], *, stop_reason: str) -> dict[str, Any]:
    return {
        "id": f"msg_01{next(_ids):022d}",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-5-5",
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {
            "input_tokens": 812,
            "output_tokens": 64,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "service_tier": "standard",
        },
    }


def anthropic_tool_use(name: str, args: dict[str, Any], *, said: str = "") -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": said}] if said else []
    content.append(
        {"type": "tool_use", "id": f"toolu_01{next(_ids):022d}", "name": name, "input": args}
    )
    return anthropic_message(content, stop_reason="tool_use")


def anthropic_text(text: str) -> dict[str, Any]:
    return anthropic_message([{"type": "text", "text": text}], stop_reason="end_turn")


# --- OpenAI Chat Completions ----------------------------------------------------------------


def openai_completion(message: dict[str, Any], *, finish_reason: str) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{next(_ids):029d}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": "gpt-4.1-2025-04-14",
        "choices": [
            {"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}
        ],
        "usage": {
            "prompt_tokens": 812,
            "completion_tokens": 64,
            "total_tokens": 876,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": 0,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        },
        "service_tier": "default",
        "system_fingerprint": "fp_b3f1157249",
    }


def openai_tool_call(name: str, arguments: dict[str, Any] | str) -> dict[str, Any]:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    call = {
        "id": f"call_{next(_ids):024d}",
        "type": "function",
        "function": {"name": name, "arguments": text},
    }
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [call],
        "refusal": None,
        "annotations": [],
    }
    return openai_completion(message, finish_reason="tool_calls")


def openai_text(text: str) -> dict[str, Any]:
    message: dict[str, Any] = {
        "role": "assistant",
        "content": text,
        "refusal": None,
        "annotations": [],
    }
    return openai_completion(message, finish_reason="stop")
