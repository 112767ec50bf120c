"""Compare a restored copy with the database it was dumped from (docs/operations.md, "Backups")."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError
from django.db import connection

from formation.backups import differences


def configured_database() -> dict[str, str]:
    """The connection parameters of the database the service is configured with."""
    settings = connection.settings_dict
    params = {"dbname": settings["NAME"]}
    for name, key in (
        ("host", "HOST"),
        ("port", "PORT"),
        ("user", "USER"),
        ("password", "PASSWORD"),
    ):
        if settings.get(key):
            params[name] = str(settings[key])
    return params


class Command(BaseCommand):
    help = (
        "Check that RESTORED (a connection URL) holds what the configured database holds: the "
        "same tables, row counts and rows, indexes, constraints, functions, triggers and "
        "sequences. Prints one line per difference (names only, never a row's content) and "
        "exits 1 if there is any. Run it right after pg_restore, before either side is written."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "restored", help="postgresql://… URL of the restored database (e.g. a scratch copy)."
        )

    def handle(self, *args, restored: str, **options) -> None:
        found = differences(configured_database(), restored)
        for line in found:
            self.stdout.write(line)
        if found:
            raise CommandError(f"The restored database differs in {len(found)} places.")
        self.stdout.write("The restored database holds what this one holds.")
