"""``manage.py audit_digest TEXT``: the digests an investigator looks a query text up by."""

import sys

from django.core.management.base import BaseCommand, CommandError

from audit_app.digests import every_digest


class Command(BaseCommand):
    help = (
        "Print the keyed digest of a query text under every configured audit key (newest "
        "first), to match conversation_search_events.query_digest. Nothing is stored or logged."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "text",
            nargs="?",
            help="The query text, as an agent would have sent it. Leave it out to read it from "
            "standard input, which keeps it out of shell history and the process list.",
        )

    def handle(self, *args, text: str | None, **options) -> None:
        if text is None:
            text = sys.stdin.read().rstrip("\n")
        if not text.strip():
            raise CommandError("TEXT is empty.")
        for key_id, digest in every_digest(text):
            self.stdout.write(f"{key_id} {digest}")
