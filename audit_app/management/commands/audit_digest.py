"""``manage.py audit_digest TEXT``: the digests an investigator looks a query text up by."""

from django.core.management.base import BaseCommand, CommandError

from audit_app.digests import every_digest


class Command(BaseCommand):
    help = (
        "Print the keyed digest of a query text under every configured audit key (newest "
        "first), to match conversation_search_events.query_digest. Nothing is stored or logged."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("text", help="The query text, as an agent would have sent it.")

    def handle(self, *args, text: str, **options) -> None:
        if not text.strip():
            raise CommandError("TEXT is empty.")
        for key_id, digest in every_digest(text):
            self.stdout.write(f"{key_id} {digest}")
