"""Whether a restored database holds what the database it was dumped from holds
(docs/operations.md, "Backups"): ``manage.py verify_restore`` and tests/test_backup.py.

Compared, in the schema Django migrates into: the tables, each table's row count and a digest
of its rows, the indexes, constraints, functions, triggers and sequences. A row's digest is the
md5 of its text form, summed over the table, so the order rows come back in does not matter and
no table is sorted; nothing of a row's content is ever printed, only table and object names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql

# Each kind of object: its name and what PostgreSQL prints for its definition.
CATALOG = {
    "table": "SELECT tablename, '' FROM pg_tables WHERE schemaname = current_schema()",
    "index": "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema()",
    "constraint": """
        SELECT conrelid::regclass || '.' || conname, pg_get_constraintdef(oid)
        FROM pg_constraint WHERE connamespace = current_schema()::regnamespace""",
    "function": """
        SELECT oid::regprocedure::text,
               CASE WHEN prokind = 'f' THEN pg_get_functiondef(oid) ELSE '' END
        FROM pg_proc WHERE pronamespace = current_schema()::regnamespace""",
    "trigger": """
        SELECT tgrelid::regclass || '.' || tgname, pg_get_triggerdef(oid)
        FROM pg_trigger
        WHERE NOT tgisinternal
          AND tgrelid IN (SELECT oid FROM pg_class
                          WHERE relnamespace = current_schema()::regnamespace)""",
    "sequence": """
        SELECT sequencename, coalesce(last_value, 0)::text
        FROM pg_sequences WHERE schemaname = current_schema()""",
}

ROWS = """
SELECT count(*), coalesce(sum(('x' || left(md5(t::text), 15))::bit(60)::bigint::numeric), 0)
FROM {} AS t
"""


@dataclass
class Snapshot:
    """What one database holds: ``objects[kind][name] = definition``, ``rows[table] =
    (count, digest)``."""

    objects: dict[str, dict[str, str]] = field(default_factory=dict)
    rows: dict[str, tuple[int, int]] = field(default_factory=dict)


def snapshot(conninfo: str | dict[str, Any]) -> Snapshot:
    """The catalog and the rows of the database ``conninfo`` names."""
    params = {"conninfo": conninfo} if isinstance(conninfo, str) else conninfo
    found = Snapshot()
    with psycopg.connect(**params) as conn:
        for kind, statement in CATALOG.items():
            found.objects[kind] = dict(conn.execute(statement).fetchall())
        for table in sorted(found.objects["table"]):
            count, digest = conn.execute(sql.SQL(ROWS).format(sql.Identifier(table))).fetchone()
            found.rows[table] = (count, int(digest))
    return found


def checks_as_restored(
    conninfo: str | dict[str, Any], constraints: dict[str, str]
) -> dict[str, str]:
    """``constraints`` with each CHECK printed as the database ``conninfo`` names prints it
    once parsed again, as pg_restore parses the dump's text.

    A CHECK of ``column IN (...)`` on a varchar column comes back from a restore with its casts
    elsewhere (the dumped text parses into another, equal, expression), so each CHECK is added
    there NOT VALID, in a transaction that is rolled back, and printed.
    """
    params = {"conninfo": conninfo} if isinstance(conninfo, str) else conninfo
    parsed = dict(constraints)
    with psycopg.connect(**params) as conn:
        for name, definition in constraints.items():
            if not definition.startswith("CHECK "):
                continue
            table = name.rsplit(".", 1)[0]
            with conn.transaction(force_rollback=True):
                conn.execute(
                    sql.SQL(
                        "ALTER TABLE {} ADD CONSTRAINT formation_parsed_again {} NOT VALID"
                    ).format(sql.Identifier(table), sql.SQL(definition))
                )
                (printed,) = conn.execute(
                    "SELECT pg_get_constraintdef(oid) FROM pg_constraint "
                    "WHERE conname = 'formation_parsed_again'"
                ).fetchone()
            parsed[name] = printed.removesuffix(" NOT VALID")
    return parsed


def differences(source: str | dict[str, Any], restored: str | dict[str, Any]) -> list[str]:
    """One line per object or table where ``restored`` differs from ``source``; none when the
    restore is whole."""
    before, after = snapshot(source), snapshot(restored)
    before.objects["constraint"] = checks_as_restored(restored, before.objects["constraint"])
    lines = []
    for kind in CATALOG:
        expected, found = before.objects[kind], after.objects[kind]
        for name in sorted(expected.keys() - found.keys()):
            lines.append(f"{kind} {name}: missing")
        for name in sorted(found.keys() - expected.keys()):
            lines.append(f"{kind} {name}: not in the source")
        for name in sorted(expected.keys() & found.keys()):
            if expected[name] != found[name]:
                lines.append(f"{kind} {name}: defined differently")
    for table in sorted(before.rows.keys() & after.rows.keys()):
        (count, digest), (restored_count, restored_digest) = before.rows[table], after.rows[table]
        if count != restored_count:
            lines.append(f"table {table}: {count} rows, {restored_count} restored")
        elif digest != restored_digest:
            lines.append(f"table {table}: {count} rows, restored with other contents")
    return lines
