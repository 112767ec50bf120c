"""Django's PostgreSQL compilers, with ``bulk_create`` as a multi-row ``VALUES`` on Citus.

Django writes a bulk insert as ``INSERT ... SELECT * FROM UNNEST(arrays)``, which Citus plans on
the coordinator ("pull to coordinator": the rows are computed there, then copied to the
shards); a multi-row ``VALUES`` whose rows name one workspace is a router insert on that
workspace's shard (docs/citus.md). Plain PostgreSQL keeps Django's form.
"""

from django.db.backends.postgresql.compiler import (
    SQLAggregateCompiler,
    SQLCompiler,
    SQLDeleteCompiler,
    SQLUpdateCompiler,
)
from django.db.backends.postgresql.compiler import SQLInsertCompiler as UnnestInsertCompiler
from django.db.models.sql.compiler import SQLInsertCompiler as ValuesInsertCompiler

__all__ = [
    "SQLAggregateCompiler",
    "SQLCompiler",
    "SQLDeleteCompiler",
    "SQLInsertCompiler",
    "SQLUpdateCompiler",
]


class SQLInsertCompiler(UnnestInsertCompiler):
    def assemble_as_sql(self, fields, value_rows):
        if self.connection.is_citus:
            return ValuesInsertCompiler.assemble_as_sql(self, fields, value_rows)
        return super().assemble_as_sql(fields, value_rows)
