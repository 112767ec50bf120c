"""Small helpers for the raw SQL the apps write: what two or more of them would otherwise each
spell out their own way."""

from __future__ import annotations

from collections.abc import Sequence

from django.db import connection


def transaction_advisory_lock(key_sql: str, params: Sequence[object], *, exclusive: bool) -> None:
    """PostgreSQL's advisory lock on ``key_sql`` (one bigint, or two ints), held until the
    current transaction ends: exclusive, or shared with the other shared holders."""
    function = "pg_advisory_xact_lock" if exclusive else "pg_advisory_xact_lock_shared"
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {function}({key_sql})", list(params))
