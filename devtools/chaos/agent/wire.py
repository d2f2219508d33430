"""What a failed call or session of the mcp harness's agent says: no answer came (the call
may or may not have been read), or the server answered an error in place of a state.
"""

from __future__ import annotations

import anyio
import httpx2
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

from agentops.mcp.http import UNAVAILABLE
from devtools.chaos.agent.calls import DROPPED, ERROR

NOT_ANSWERED = (CONNECTION_CLOSED, REQUEST_TIMEOUT, UNAVAILABLE)
"""JSON-RPC errors that say the call was not answered: the connection closed, the call timed
out, or the server did not read it (its token could not be checked: nothing was done)."""
CALL_TIMEOUT = 30.0
"""How long a call may take before the agent gives up on it (a dropped call)."""


def seen_of_exception(exc: BaseException) -> tuple[str, str]:
    """What a failed call or session says: :data:`DROPPED` when no answer came (the
    connection failed, closed or timed out, or the server said it did not read the call),
    :data:`ERROR` when the server answered an error
    (a JSON-RPC error, an HTTP error status, an answer the SDK could not read); and a
    sentence."""
    leaves: list[BaseException] = []

    def walk(e: BaseException) -> None:
        if isinstance(e, BaseExceptionGroup):
            for inner in e.exceptions:
                walk(inner)
        else:
            leaves.append(e)

    walk(exc)
    said = "; ".join(f"{type(e).__name__}: {e}"[:160] for e in leaves) or repr(exc)[:200]
    for leaf in leaves:
        if isinstance(leaf, MCPError) and leaf.code not in NOT_ANSWERED:
            return ERROR, f"MCP error {leaf.code}: {leaf.message}"
        status = getattr(getattr(leaf, "response", None), "status_code", None)
        if isinstance(status, int):
            return ERROR, f"HTTP {status}"
    no_answer = (
        MCPError,
        httpx2.TransportError,
        OSError,
        TimeoutError,
        anyio.ClosedResourceError,
        anyio.BrokenResourceError,
        anyio.EndOfStream,
    )
    if leaves and all(isinstance(e, no_answer) for e in leaves):
        return DROPPED, said
    return ERROR, said
