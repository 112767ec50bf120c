import uuid

from django.core.management.base import BaseCommand, CommandError, CommandParser

from messages_app.models import Agent, TokenKind, Workspace
from messages_app.services import token_create


class Command(BaseCommand):
    help = (
        "Create an API token for a workspace: --service (the runtime) or --agent AGENT_ID. "
        "Prints the token as the last line; only its hash is stored, so keep it now."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--workspace", required=True, help="Slug of the workspace.")
        kind = parser.add_mutually_exclusive_group(required=True)
        kind.add_argument(
            "--service", action="store_true", help="A service token: writes the workspace."
        )
        kind.add_argument("--agent", metavar="AGENT_ID", help="An agent token acting as AGENT_ID.")

    def handle(self, *args, workspace: str, service: bool, agent: str | None, **options) -> None:
        found = Workspace.objects.filter(slug=workspace).first()
        if found is None:
            raise CommandError(f"No workspace with slug {workspace!r}.")
        if service:
            _, raw = token_create(workspace_id=found.id, kind=TokenKind.SERVICE)
        else:
            try:
                agent_id = uuid.UUID(agent)
            except ValueError as bad:
                raise CommandError("AGENT_ID must be a UUID.") from bad
            subject = Agent.objects.filter(workspace=found, pk=agent_id).first()
            if subject is None:
                raise CommandError("No agent with that id in this workspace.")
            _, raw = token_create(workspace_id=found.id, kind=TokenKind.AGENT, agent=subject)
        self.stdout.write(raw)
