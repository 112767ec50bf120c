import time

from django.core.management.base import BaseCommand, CommandError, CommandParser

from messages_app.models import Message, Workspace
from search_app.documents import DEFAULT_BATCH_SIZE, RebuildReport, search_documents_rebuild

PROGRESS_EVERY_SECONDS = 1.0


class Command(BaseCommand):
    help = (
        "Check message_search_documents against the canonical messages and repair any drift "
        "(missing, stale or orphaned rows), of every workspace or one. Prints how many rows had "
        "to be fixed."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--batch-size",
            type=int,
            default=DEFAULT_BATCH_SIZE,
            help=f"Messages per transaction (default {DEFAULT_BATCH_SIZE}).",
        )
        parser.add_argument(
            "--check",
            action="store_true",
            help="Only report drift; change nothing. Exits with status 1 if any is found.",
        )
        parser.add_argument(
            "--workspace",
            metavar="SLUG",
            help="Only this workspace's messages, e.g. after its language was changed.",
        )

    def handle(self, *args, batch_size: int, check: bool, workspace: str | None, **options) -> None:
        if not 1 <= batch_size <= 100_000:
            raise CommandError("--batch-size must be between 1 and 100000.")
        messages = Message.objects.all()
        workspace_id = None
        if workspace is not None:
            workspace_id = (
                Workspace.objects.filter(slug=workspace).values_list("id", flat=True).first()
            )
            if workspace_id is None:
                raise CommandError("No workspace has this slug.")
            messages = messages.filter(workspace_id=workspace_id)
        total = messages.count()
        self.stdout.write(f"Checking {total} messages in batches of {batch_size}...")

        last_shown = time.monotonic()

        def show(report: RebuildReport) -> None:
            nonlocal last_shown
            if time.monotonic() - last_shown < PROGRESS_EVERY_SECONDS:
                return
            last_shown = time.monotonic()
            self.stdout.write(
                f"  {report.checked}/{total} messages checked, "
                f"{report.fixed} {'drifted' if check else 'fixed'}"
            )

        report = search_documents_rebuild(
            fix=not check, batch_size=batch_size, progress=show, workspace_id=workspace_id
        )
        detail = (
            f"{report.missing} missing, {report.stale} stale, "
            f"{report.orphaned} for deleted messages"
        )
        if check:
            self.stdout.write(
                f"Checked {report.checked} messages: {report.fixed} rows drifted ({detail})."
            )
            if report.fixed:
                raise CommandError("The search documents have drifted; run without --check.")
        else:
            self.stdout.write(
                f"Checked {report.checked} messages: fixed {report.fixed} rows ({detail})."
            )
