"""``manage.py create_agent --workspace SLUG NAME``: the agent id ``create_token --agent`` takes.

The same write as ``POST /api/v1/agents``, for a new workspace that has no service token in use
yet.
"""

from django.core.management.base import BaseCommand, CommandError, CommandParser

from messages_app.limits import MAX_NAME_CHARS
from messages_app.models import Workspace
from messages_app.services import agent_create


class Command(BaseCommand):
    help = "Create an agent in a workspace. Prints the new agent id as the last line."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", metavar="NAME", help="The agent's display name.")
        parser.add_argument("--workspace", required=True, help="Slug of the workspace.")

    def handle(self, *args, name: str, workspace: str, **options) -> None:
        name = name.strip()
        if not name or len(name) > MAX_NAME_CHARS:
            raise CommandError(f"NAME must be 1-{MAX_NAME_CHARS} characters.")
        found = Workspace.objects.filter(slug=workspace).first()
        if found is None:
            raise CommandError(f"No workspace with slug {workspace!r}.")
        agent = agent_create(workspace_id=found.id, name=name)
        self.stdout.write(str(agent.id))
