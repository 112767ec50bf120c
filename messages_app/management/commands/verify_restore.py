"""Compare a restored copy with the database it was dumped from (docs/operations.md, "Backups")."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError
from django.db import connection

from formation.backups import differences

# Connection parameters libpq takes from Django's (OPTIONS included: a DATABASE_URL's ?host=).
LIBPQ_PARAMETERS = frozenset(
    {
        "host",
        "hostaddr",
        "port",
        "dbname",
        "user",
        "password",
        "options",
        "sslmode",
        "sslrootcert",
        "sslcert",
        "sslkey",
        "connect_timeout",
        "application_name",
    }
)


def configured_database() -> dict[str, str]:
    """The connection parameters of the database the service is configured with."""
    return {
        name: str(value)
        for name, value in connection.get_connection_params().items()
        if name in LIBPQ_PARAMETERS and value not in (None, "")
    }


class Command(BaseCommand):
    help = (
        "Check that RESTORED (a connection URL) holds what the configured database holds: the "
        "same tables, row counts and rows, indexes, constraints, functions, triggers and "
        "sequences. Prints one line per difference (names only, never a row's content) and "
        "exits 1 if there is any. Compare rows only with a source nobody writes to (a restore "
        "drill of a quiet copy); --objects-only checks a copy of a live database."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "restored", help="postgresql://… URL of the restored database (e.g. a scratch copy)."
        )
        parser.add_argument(
            "--objects-only",
            action="store_true",
            help="Compare tables, indexes, constraints, functions, triggers and sequences by "
            "definition, not the rows (the source is still being written).",
        )

    def handle(self, *args, restored: str, objects_only: bool, **options) -> None:
        found = differences(configured_database(), restored, rows=not objects_only)
        for line in found:
            self.stdout.write(line)
        if found:
            raise CommandError(f"The restored database differs in {len(found)} places.")
        self.stdout.write("The restored database holds what this one holds.")
