"""``manage.py mcp_server``: the installed apps' intents over MCP (agentops/mcp, issue 18).

- ``--transport stdio`` (the default): for a client that starts the server itself. Every call
  is made as the API client named by ``--client`` or ``MCP_CLIENT``, which must hold the
  ``mcp`` scope: what it does is recorded as ``mcp:<name>``.
- ``--transport http``: streamable HTTP at ``http://HOST:PORT/mcp``, on loopback unless
  ``--host`` (or ``MCP_HOST``) says otherwise; every request carries a client's token with
  the ``mcp`` scope (``Authorization: Bearer ao_live_…``).
"""

from __future__ import annotations

import sys
from typing import Any

import anyio
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from agentops.mcp.server import ClientRefused, build_server, client_get

SHUTDOWN_SECONDS = 5
"""How long, once told to stop, the HTTP server lets requests under way finish."""


async def _serve_stdio(client: str) -> None:
    from mcp.server.stdio import stdio_server

    server = build_server(client=client)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


class Command(BaseCommand):
    help = "Serve the installed apps' intents over MCP, on stdio or streamable HTTP."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--transport", choices=("stdio", "http"), default="stdio")
        parser.add_argument(
            "--client",
            default="",
            help="stdio: the API client (with the mcp scope) every call is made as "
            "(default: MCP_CLIENT)",
        )
        parser.add_argument("--host", default="", help="http: address (default: MCP_HOST)")
        parser.add_argument("--port", type=int, default=0, help="http: port (default: MCP_PORT)")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["transport"] == "stdio":
            name = options["client"] or settings.MCP_CLIENT
            if not name:
                raise CommandError(
                    "on stdio every call is made as an API client: give --client NAME or set "
                    "MCP_CLIENT (manage.py api_client create NAME --scope mcp)"
                )
            try:
                client_get(name)
            except ClientRefused as exc:
                raise CommandError(str(exc)) from exc
            anyio.run(_serve_stdio, name)
            return
        import uvicorn

        from agentops.mcp.http import PATH, http_app

        host = options["host"] or settings.MCP_HOST
        port = options["port"] or settings.MCP_PORT
        _, gate = http_app(host=host)
        # The ready line on stderr: stdout stays free, as on stdio.
        print(f"mcp server on http://{host}:{port}{PATH}", file=sys.stderr, flush=True)
        # Ctrl-C or SIGTERM: requests under way get a few seconds to end, then the server
        # stops, though a client holds its event stream open (an intent that was waiting goes
        # on in the workers; asked again, the journal answers it).
        uvicorn.run(
            gate,
            host=host,
            port=port,
            log_level="warning",
            lifespan="on",
            timeout_graceful_shutdown=SHUTDOWN_SECONDS,
        )
