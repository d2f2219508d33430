"""Clients of the HTTP API (agentops/api): ``manage.py api_client create <name> --scope
tasks:start --scope tasks:read`` (prints the token, once), ``revoke <name>``, ``list``."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from agentops.api.auth import ApiClientRefused, api_client_create, api_client_revoke
from agentops.models import ApiClient, ApiScope


class Command(BaseCommand):
    help = "Create, revoke or list the clients of the HTTP API and their scopes."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        create = actions.add_parser("create", help="a new client; its token is printed once")
        create.add_argument("name", help="recorded as api:<name> for everything it does")
        create.add_argument(
            "--scope",
            action="append",
            required=True,
            choices=ApiScope.values,
            help="what it may do, once per scope: "
            + "; ".join(f"{s.value}: {s.label}" for s in ApiScope),
        )
        revoke = actions.add_parser("revoke", help="its token is refused from now on (401)")
        revoke.add_argument("name")
        actions.add_parser("list", help="every client, its scopes and when it was last used")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            if options["action"] == "create":
                client, token = api_client_create(name=options["name"], scopes=options["scope"])
                # The token alone on stdout (for scripts: TOKEN=$(… api_client create …));
                # what to do with it on stderr.
                self.stdout.write(token)
                self.stderr.write(
                    f"client {client.name} ({', '.join(client.scopes)}): this token is shown "
                    "once and stored only as a hash; send it as Authorization: Bearer <token>"
                )
            elif options["action"] == "revoke":
                client = api_client_revoke(name=options["name"])
                self.stdout.write(f"client {client.name} revoked on {client.revoked_at}")
            else:
                for client in ApiClient.objects.order_by("name"):
                    state = "live"
                    if client.revoked_at is not None:
                        state = f"revoked {client.revoked_at:%Y-%m-%d %H:%M}"
                    used = "never"
                    if client.last_used_at is not None:
                        used = f"{client.last_used_at:%Y-%m-%d %H:%M}"
                    self.stdout.write(
                        f"{client.name}  {client.prefix}…  {','.join(client.scopes)}  {state}  "
                        f"last used {used}"
                    )
        except ApiClientRefused as exc:
            raise CommandError(str(exc)) from exc
