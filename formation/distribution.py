"""Tenant tables distributed by workspace on Citus; nothing at all on plain PostgreSQL.

Which table is which comes from the models: one with a ``workspace_id`` column is a tenant
table, distributed by it and co-located with the others, so every statement that names one
workspace runs on one shard group; a table the tenant tables reference by a foreign key but
that has no ``workspace_id`` itself (``Workspace``) becomes a reference table, copied to every
node; every other table (Django's auth, sessions, admin log, migrations) stays on the
coordinator. ``distribute`` runs after every ``migrate`` (``post_migrate``) and is idempotent:
a table a later migration adds is distributed the next time, and one already distributed is
left alone (docs/citus.md).

Citus distributes a table only when no local table's foreign key points at it, so the foreign
keys among the tables still to distribute are read, dropped, and created again once every
table is in place, in one transaction.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from django.apps import apps
from django.db import connection, models, transaction

logger = logging.getLogger("formation.distribution")

DISTRIBUTION_COLUMN = "workspace_id"


@dataclass(frozen=True)
class Layout:
    tenant: list[str]
    reference: list[str]


def layout() -> Layout:
    """Tenant and reference tables, from the installed models."""
    tenant: list[str] = []
    referenced: set[str] = set()
    for model in apps.get_models():
        if model._meta.proxy or not model._meta.managed:
            continue
        columns = {field.column for field in model._meta.concrete_fields}
        if DISTRIBUTION_COLUMN not in columns:
            continue
        tenant.append(model._meta.db_table)
        for field in model._meta.concrete_fields:
            if isinstance(field, models.ForeignKey) and field.db_constraint:
                referenced.add(field.related_model._meta.db_table)
    return Layout(tenant=sorted(tenant), reference=sorted(referenced - set(tenant)))


def is_citus() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_extension WHERE extname = 'citus'")
        return cursor.fetchone() is not None


def undistributed(tables: list[str]) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT logicalrelid::regclass::text FROM pg_dist_partition "
            "WHERE logicalrelid::regclass::text = ANY (%s)",
            [tables],
        )
        done = {name for (name,) in cursor.fetchall()}
    return [table for table in tables if table not in done]


def distribute() -> list[str]:
    """Distribute what is not yet distributed; the tables it distributed, in order."""
    if not is_citus():
        return []
    wanted = layout()
    reference = undistributed(wanted.reference)
    tenant = undistributed(wanted.tenant)
    if not reference and not tenant:
        return []
    shard_count = int(os.environ.get("CITUS_SHARD_COUNT", "32"))
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL citus.enable_unsafe_triggers = on")
        cursor.execute("SET LOCAL citus.shard_count = %s", [shard_count])
        # Distributing a table and writing to it in one transaction needs one connection per
        # node, not one per shard.
        cursor.execute("SET LOCAL citus.multi_shard_modify_mode = 'sequential'")
        keys = _foreign_keys(cursor, [*reference, *tenant])
        for table, name, _ in keys:
            cursor.execute(f'ALTER TABLE {table} DROP CONSTRAINT "{name}"')
        for table in reference:
            cursor.execute("SELECT create_reference_table(%s)", [table])
        anchor = _colocation_anchor(cursor, wanted.tenant, tenant)
        for table in tenant:
            cursor.execute(
                "SELECT create_distributed_table(%s, %s, colocate_with => %s)",
                [table, DISTRIBUTION_COLUMN, anchor or "none"],
            )
            anchor = anchor or table
        for table, name, definition in keys:
            cursor.execute(f'ALTER TABLE {table} ADD CONSTRAINT "{name}" {definition}')
    logger.info("distributed %d tables", len(reference) + len(tenant))
    return [*reference, *tenant]


def _foreign_keys(cursor, tables: list[str]) -> list[tuple[str, str, str]]:
    """Every foreign key from or to one of ``tables``: (table, name, definition)."""
    cursor.execute(
        """SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid)
           FROM pg_constraint
           WHERE contype = 'f'
             AND (conrelid::regclass::text = ANY (%(tables)s)
                  OR confrelid::regclass::text = ANY (%(tables)s))
           ORDER BY conrelid::regclass::text, conname""",
        {"tables": tables},
    )
    return cursor.fetchall()


def _colocation_anchor(cursor, all_tenant: list[str], pending: list[str]) -> str | None:
    """A tenant table already distributed, for the new ones to be co-located with."""
    done = [table for table in all_tenant if table not in pending]
    return done[0] if done else None
