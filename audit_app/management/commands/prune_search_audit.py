"""``manage.py prune_search_audit --older-than DAYS``: drop old search events in batches."""

from datetime import timedelta

from django.core.management.base import BaseCommand, CommandError

from audit_app.services import PRUNE_BATCH, search_events_prune


class Command(BaseCommand):
    help = "Delete search audit events older than DAYS days, in batches, and say how many."

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--older-than",
            type=int,
            required=True,
            metavar="DAYS",
            help="Delete events created more than this many days ago (at least 1).",
        )
        parser.add_argument(
            "--batch-size",
            type=int,
            default=PRUNE_BATCH,
            help=f"Events deleted per transaction (default {PRUNE_BATCH}).",
        )

    def handle(self, *args, older_than: int, batch_size: int, **options) -> None:
        if older_than < 1:
            raise CommandError("--older-than must be at least 1 day.")
        if older_than > 36_500:
            raise CommandError("--older-than must be at most 36500 days.")
        if batch_size < 1:
            raise CommandError("--batch-size must be at least 1.")
        deleted = search_events_prune(
            older_than=timedelta(days=older_than),
            batch_size=batch_size,
            progress=lambda done: self.stdout.write(f"deleted {done} so far"),
        )
        self.stdout.write(f"deleted {deleted} search audit events older than {older_than} days")
