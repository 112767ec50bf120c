"""The small toolkit every piece of raw SQL in the apps is built with.

Raw SQL lives where the ORM cannot say what the plan needs (the perspective's scope, the ranked
hits, the lifecycle's batch statements). These helpers keep the pieces such code repeats in one
place: table names read from the models, literal lists rendered by psycopg (never by Python's
``repr``), named parameters merged so that two fragments can never silently rebind one name,
rows read back by column name, and PostgreSQL's transaction advisory lock.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from django.db import connection, models
from psycopg import sql as psycopg_sql
from psycopg.rows import namedtuple_row


def table(model: type[models.Model]) -> str:
    """The table a model is stored in, as SQL text (the apps' tables need no quoting)."""
    return model._meta.db_table


def literals(values: Iterable[str | int]) -> str:
    """A comma-separated list of SQL literals, quoted by psycopg, for an ``IN (...)`` list that
    must be part of the statement's text (a partial index's predicate only matches constants)."""
    return psycopg_sql.SQL(", ").join(psycopg_sql.Literal(value) for value in values).as_string()


# What the apps' sql/ files and the migrations that copy them write where a function body names
# the schema of a table or function it uses.
SCHEMA_PLACEHOLDER = "@schema@"
PLAIN_NAME = re.compile(r"[a-z_][a-z0-9_]*")


def in_schema(definitions: str, schema: str) -> str:
    """``definitions`` with each ``@schema@`` replaced by ``schema`` (quoted unless it is a
    plain lower-case name, so ``public`` reads as it is written by hand).

    Function bodies name the schema of what they call because pg_restore, autovacuum and index
    maintenance run them with an empty ``search_path``; the schema is the one the migrations
    run in, which only the database knows (``current_schema()``), so the text carries a
    placeholder rather than a fixed name.
    """
    name = schema if PLAIN_NAME.fullmatch(schema) else psycopg_sql.Identifier(schema).as_string()
    return definitions.replace(SCHEMA_PLACEHOLDER, name)


def current_schema(cursor: Any) -> str:
    """The schema unqualified names are created in: the one Django migrates into."""
    cursor.execute("SELECT current_schema()")
    (schema,) = cursor.fetchone()
    return schema


class ParameterCollision(ValueError):
    """Two fragments of one statement bind the same parameter name to different values."""


def merge_params(*parts: Mapping[str, object]) -> dict[str, object]:
    """One statement's named parameters from its fragments' own.

    A name may come from two fragments only with the same value: a fragment that rebound
    another's parameter would change what the other fragment means without a trace.
    """
    merged: dict[str, object] = {}
    for part in parts:
        for name, value in part.items():
            if name in merged and merged[name] != value:
                raise ParameterCollision(f"the SQL parameter {name!r} is bound twice")
            merged[name] = value
    return merged


@contextmanager
def named_rows() -> Iterator[Any]:
    """A cursor whose rows are named tuples (``psycopg.rows.namedtuple_row``), so a reader
    takes ``row.conversation_id`` rather than counting columns."""
    with connection.cursor() as cursor:
        cursor.cursor.row_factory = namedtuple_row
        yield cursor


def transaction_advisory_lock(key_sql: str, params: Sequence[object], *, exclusive: bool) -> None:
    """PostgreSQL's advisory lock on ``key_sql`` (one bigint, or two ints), held until the
    current transaction ends: exclusive, or shared with the other shared holders."""
    function = "pg_advisory_xact_lock" if exclusive else "pg_advisory_xact_lock_shared"
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {function}({key_sql})", list(params))
