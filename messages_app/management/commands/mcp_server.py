import os

import anyio
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connections

from formation.errors import ApiError
from formation.mcp_server import serve_stdio
from formation.tools import caller_for_token

TOKEN_VARIABLE = "FORMATION_TOKEN"


class Command(BaseCommand):
    help = (
        "Serve the agent tools over MCP on stdin/stdout (for an MCP client that launches the "
        "server), acting as the agent or run of an agent or run token. search_history needs a "
        f"run token. The token can also come from ${TOKEN_VARIABLE}, which keeps it out of the "
        "process list."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--token",
            default=os.environ.get(TOKEN_VARIABLE),
            help=f"An agent or run token (default: ${TOKEN_VARIABLE}).",
        )

    def handle(self, *args, token: str | None, **options) -> None:
        if not token:
            raise CommandError(f"Give --token or set {TOKEN_VARIABLE}.")
        try:
            caller = caller_for_token(token)
        except ApiError as error:
            raise CommandError(error.message) from None
        finally:
            # Tool calls run in worker threads with their own connections.
            connections.close_all()
        if not caller.acts_as_agent:
            raise CommandError("The MCP server needs an agent or run token.")
        anyio.run(serve_stdio, token)
