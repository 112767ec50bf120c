import secrets

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from messages_app.demo import demo_run_create, demo_workspace_load
from messages_app.models import TokenKind
from messages_app.services import token_create


class Command(BaseCommand):
    help = (
        "Load the synthetic demo workspace (once), then print fresh demo tokens and an admin "
        "login. Tokens are stored hashed, so each run prints new ones."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--admin-username", default="admin", help="Superuser to create or reset."
        )

    def handle(self, *args, admin_username: str, **options) -> None:
        if not settings.DEBUG:
            # It resets the admin's password: never against a real deployment.
            raise CommandError("load_demo is for local development only: run it with DEBUG=1.")
        demo = demo_workspace_load()
        verb = "Created" if demo.created else "Reusing"
        self.stdout.write(f"{verb} workspace {demo.workspace.slug!r} ({demo.workspace.id})")
        _, service_token = token_create(workspace_id=demo.workspace.id, kind=TokenKind.SERVICE)
        _, agent_token = token_create(
            workspace_id=demo.workspace.id, kind=TokenKind.AGENT, agent=demo.agent
        )
        password = secrets.token_urlsafe(12)
        user_model = get_user_model()
        admin, _ = user_model.objects.get_or_create(
            username=admin_username, defaults={"is_staff": True, "is_superuser": True}
        )
        admin.is_staff = admin.is_superuser = True
        admin.set_password(password)
        admin.save()
        self.stdout.write(f"Demo agent id:  {demo.agent.id}")
        self.stdout.write(f"Service token:  {service_token}")
        self.stdout.write(f"Agent token:    {agent_token}")
        run, run_token = demo_run_create(demo)
        self.stdout.write(f"Run id:         {run.id}")
        self.stdout.write(f"Run token:      {run_token}  (Ada's direct conversation)")
        self.stdout.write(f"Admin login:    {admin_username} / {password}")
