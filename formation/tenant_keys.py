"""Migration operations for keys that carry the workspace (docs/citus.md).

A table distributed by ``workspace_id`` can only enforce a primary, unique or foreign key that
includes ``workspace_id``; these operations write such keys on plain PostgreSQL too, so the
schema is the same on both engines. Django keeps ``id`` as each model's pk: only the database
key changes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from django.db import migrations


def workspace_primary_keys(tables: Iterable[str], column: str = "id") -> migrations.RunSQL:
    """``PRIMARY KEY (workspace_id, <column>)`` instead of ``PRIMARY KEY (<column>)``."""
    tables = list(tables)
    return migrations.RunSQL(
        sql=[
            f"ALTER TABLE {table} DROP CONSTRAINT {table}_pkey, "
            f"ADD CONSTRAINT {table}_pkey PRIMARY KEY (workspace_id, {column})"
            for table in tables
        ],
        reverse_sql=[
            f"ALTER TABLE {table} DROP CONSTRAINT {table}_pkey, "
            f"ADD CONSTRAINT {table}_pkey PRIMARY KEY ({column})"
            for table in tables
        ],
    )


def composite_foreign_keys(
    keys: Iterable[tuple[str, str, str, str, str]],
) -> migrations.RunSQL:
    """Foreign keys ``(workspace_id, columns) -> target (workspace_id, target columns)``.

    Each row is (table, constraint name, columns, target table, target columns), the columns
    without ``workspace_id``. ``DEFERRABLE INITIALLY IMMEDIATE``: checked per statement, and a
    transaction that must may defer them. With MATCH SIMPLE a null reference is not checked.
    """
    keys = list(keys)
    return migrations.RunSQL(
        sql=[
            f"ALTER TABLE {table} ADD CONSTRAINT {name} FOREIGN KEY (workspace_id, {columns}) "
            f"REFERENCES {target} (workspace_id, {target_columns}) DEFERRABLE INITIALLY IMMEDIATE"
            for table, name, columns, target, target_columns in keys
        ],
        reverse_sql=[f"ALTER TABLE {table} DROP CONSTRAINT {name}" for table, name, *_ in keys],
    )


def drop_constraints(constraints: Mapping[str, Iterable[str]]) -> migrations.RunSQL:
    """Drop named constraints, table by table (their replacements come later in the same
    migration or the next one, so the reverse is left to those)."""
    return migrations.RunSQL(
        sql=[
            f"ALTER TABLE {table} DROP CONSTRAINT {name}"
            for table, names in constraints.items()
            for name in names
        ],
        reverse_sql=migrations.RunSQL.noop,
    )
