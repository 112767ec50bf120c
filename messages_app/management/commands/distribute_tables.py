"""Distribute the tenant tables on Citus (``migrate`` does it too); report what is where."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from formation.distribution import distribute, is_citus, layout, undistributed


class Command(BaseCommand):
    help = (
        "On Citus: make the workspace table a reference table and distribute every tenant "
        "table by workspace_id, co-located (idempotent; migrate does it too). --check reports "
        "tables not yet distributed and exits 1 if there are any."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--check", action="store_true", help="Report only.")

    def handle(self, *args, check: bool, **options) -> None:
        if not is_citus():
            self.stdout.write("Not a Citus database: nothing to distribute.")
            return
        wanted = layout()
        missing = undistributed([*wanted.reference, *wanted.tenant])
        if check:
            self.stdout.write(
                f"{len(wanted.tenant)} tenant tables, {len(wanted.reference)} reference tables; "
                f"{len(missing)} not distributed" + (f": {', '.join(missing)}" if missing else "")
            )
            if missing:
                raise CommandError("Some tables are not distributed.")
            return
        done = distribute()
        self.stdout.write(
            f"distributed {len(done)} tables" + (f": {', '.join(done)}" if done else "")
        )
