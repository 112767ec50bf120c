"""``manage.py export_workspace SLUG --output FILE``: a workspace's messages as JSON Lines."""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser

from audit_app.lifecycle import Actor
from audit_app.models import LifecycleSubject
from messages_app.lifecycle import DEFAULT_BATCH_SIZE, MAX_BATCH_SIZE, export_start
from messages_app.lifecycle_serializers import json_lines
from messages_app.models import Workspace

# How often (in messages) progress is printed.
PROGRESS_EVERY = 10_000


class Command(BaseCommand):
    help = (
        "Write every live message of a workspace to FILE as JSON Lines (one message summary a "
        "line, conversation by conversation, each in order), in constant memory; the export "
        "is recorded in the lifecycle record."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("slug", metavar="SLUG", help="Slug of the workspace.")
        parser.add_argument(
            "--output", required=True, metavar="FILE", help="The file to write (replaced)."
        )
        parser.add_argument(
            "--batch-size",
            type=int,
            default=DEFAULT_BATCH_SIZE,
            help=f"Messages read per statement, 1 to {MAX_BATCH_SIZE} "
            f"(default {DEFAULT_BATCH_SIZE}).",
        )

    def handle(self, *args, slug: str, output: str, batch_size: int, **options) -> None:
        if not 1 <= batch_size <= MAX_BATCH_SIZE:
            raise CommandError(f"--batch-size must be between 1 and {MAX_BATCH_SIZE}.")
        workspace = Workspace.objects.filter(slug=slug).first()
        if workspace is None:
            raise CommandError(f"No workspace with slug {slug!r}.")
        target = Path(output)
        if not target.parent.is_dir():
            raise CommandError("The output file's directory does not exist.")
        export = export_start(
            workspace_id=workspace.id,
            subject_kind=LifecycleSubject.WORKSPACE,
            subject_id=workspace.id,
            actor=Actor(label="manage.py export_workspace"),
            batch_size=batch_size,
        )
        reported = 0
        with target.open("wb") as file:
            for chunk in export.chunks(json_lines):
                file.write(chunk)
                if export.exported - reported >= PROGRESS_EVERY:
                    reported = export.exported
                    self.stdout.write(f"exported {reported} messages so far")
        self.stdout.write(f"exported {export.exported} messages of {slug} to {target}")
