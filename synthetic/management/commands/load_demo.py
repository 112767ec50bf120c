import os
import re
import secrets

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from synthetic.demo import demo_tokens_issue, demo_workspace_load

SAFE_BASE_URL = re.compile(r"https?://[\w.\-:\[\]]+(?:/[\w.\-/]*)?")
DEFAULT_BASE_URL = "http://127.0.0.1:8000"


class Command(BaseCommand):
    help = (
        "Load the synthetic demo workspace (once), revoke the earlier demo tokens, then print "
        "fresh ones as shell export lines, and an admin login. Tokens are stored hashed, so each "
        "run prints new ones."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--admin-username", default="admin", help="Superuser to create or reset."
        )
        parser.add_argument(
            "--base-url",
            default=None,
            help="Where the server answers, printed as FORMATION_URL (make run passes HOST:PORT). "
            "Default: $FORMATION_URL, which the lines printed last time set in the shell they "
            f"were pasted into, else {DEFAULT_BASE_URL}.",
        )

    def handle(self, *args, admin_username: str, base_url: str | None, **options) -> None:
        if not settings.DEBUG:
            # It resets the admin's password: never against a real deployment.
            raise CommandError("load_demo is for local development only: run it with DEBUG=1.")
        # A server on another port (make run PORT=8001) is where the earlier lines pointed.
        base_url = base_url or os.environ.get("FORMATION_URL") or DEFAULT_BASE_URL
        # It is printed into a line meant to be pasted into a shell: nothing a shell reads.
        if not SAFE_BASE_URL.fullmatch(base_url):
            raise CommandError(
                "--base-url (or FORMATION_URL) must be an http:// or https:// address."
            )
        base_url = base_url.rstrip("/")
        demo = demo_workspace_load()
        tokens = demo_tokens_issue(demo)
        password = secrets.token_urlsafe(12)
        user_model = get_user_model()
        admin, _ = user_model.objects.get_or_create(
            username=admin_username, defaults={"is_staff": True, "is_superuser": True}
        )
        admin.is_staff = admin.is_superuser = True
        admin.set_password(password)
        admin.save()
        verb = "Created" if demo.created else "Reusing"
        self.stdout.write(f"{verb} workspace {demo.workspace.slug!r} ({demo.workspace.id}).")
        if tokens.revoked:
            self.stdout.write(f"Revoked earlier demo tokens: {tokens.revoked}.")
        self.stdout.write(f"Admin login: {admin_username} / {password} at {base_url}/admin/")
        self.stdout.write("")
        self.stdout.write("# Paste these lines into your shell; the README's commands use them:")
        self.stdout.write(f"export FORMATION_URL={base_url}")
        self.stdout.write(f"export SERVICE_TOKEN={tokens.service}")
        self.stdout.write(f"export AGENT_ID={demo.agent.id}")
        self.stdout.write(f"export AGENT_TOKEN={tokens.agent}")
        self.stdout.write(f"export RUN_ID={tokens.run.id}")
        self.stdout.write(f"export RUN_TOKEN={tokens.run_token}  # Ada's direct conversation")
