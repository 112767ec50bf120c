"""``manage.py apply_retention``: erase every message older than its retention period."""

from django.core.management.base import BaseCommand, CommandError, CommandParser

from audit_app.lifecycle import Actor
from formation.display import counted
from messages_app.lifecycle.retention import retention_apply
from messages_app.limits import DEFAULT_BATCH_SIZE, MAX_BATCH_SIZE
from messages_app.models import Workspace


class Command(BaseCommand):
    help = (
        "Erase every message older than its conversation's retention period (the workspace's, "
        "or the conversation's own), as a delete erases it, in batches, skipping legal holds. "
        "Safe to run again at any time: a run that stopped midway is finished by the next."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--workspace", metavar="SLUG", help="Only this workspace (default: every workspace)."
        )
        parser.add_argument(
            "--batch-size",
            type=int,
            default=DEFAULT_BATCH_SIZE,
            help=f"Messages erased per transaction, 1 to {MAX_BATCH_SIZE} "
            f"(default {DEFAULT_BATCH_SIZE}).",
        )

    def handle(self, *args, workspace: str | None, batch_size: int, **options) -> None:
        if not 1 <= batch_size <= MAX_BATCH_SIZE:
            raise CommandError(f"--batch-size must be between 1 and {MAX_BATCH_SIZE}.")
        if workspace is not None and not Workspace.objects.filter(slug=workspace).exists():
            raise CommandError(f"No workspace with slug {workspace!r}.")
        reports = retention_apply(
            actor=Actor(label="manage.py apply_retention"),
            workspace_slug=workspace,
            batch_size=batch_size,
            progress=lambda report, conversation_id, erased: self.stdout.write(
                f"{report.slug}: erased {erased} in conversation {conversation_id} "
                f"({report.messages} in the workspace so far)"
            ),
        )
        for report in reports:
            self.stdout.write(
                f"{report.slug}: erased {counted(report.messages, 'message')} in "
                f"{counted(report.conversations, 'conversation')}; skipped "
                f"{counted(report.held_conversations, 'held conversation')}"
            )
        if not reports:
            self.stdout.write("no workspace has a retention period")
