"""Many rows in one ``INSERT``, in the form each engine runs best.

Plain PostgreSQL gets ``INSERT ... SELECT FROM unnest(arrays)``: one array parameter per column,
so the SQL text and the parameter adaptation do not grow with the batch. Citus plans that form
on the coordinator (it computes the rows, then copies them to the shards), so there the rows
travel as a multi-row ``VALUES``, which Citus routes to the shard of the one workspace they
all name (docs/citus.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from django.db import connection


def insert_rows(
    table: str,
    columns: Sequence[tuple[str, str]],
    rows: Sequence[Sequence[object]],
    *,
    fixed: Mapping[str, str] | None = None,
    suffix: str = "",
) -> int:
    """Insert ``rows`` (one value per ``(column, type)`` of ``columns``, in order) into
    ``table``; ``fixed`` columns take the same SQL expression in every row (``now()``), and
    ``suffix`` ends the statement (an ``ON CONFLICT`` clause). How many rows it inserted (an
    ``ON CONFLICT DO NOTHING`` skips some)."""
    fixed = dict(fixed or {})
    names = ", ".join([*(column for column, _ in columns), *fixed])
    if connection.is_citus:
        row = ", ".join([*(f"%s::{kind}" for _, kind in columns), *fixed.values()])
        values = ", ".join([f"({row})"] * len(rows))
        sql = f"INSERT INTO {table} ({names}) VALUES {values} {suffix}"
        params = [value for values_of_row in rows for value in values_of_row]
    else:
        arrays = ", ".join(f"%s::{kind}[]" for _, kind in columns)
        selected = ", ".join(["u.*", *fixed.values()])
        sql = f"INSERT INTO {table} ({names}) SELECT {selected} FROM unnest({arrays}) AS u {suffix}"
        params = [[row[index] for row in rows] for index in range(len(columns))]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount
