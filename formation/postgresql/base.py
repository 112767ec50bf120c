"""Django's PostgreSQL backend, told that a model's pk is not its table's primary key, and
aware of Citus.

Every tenant table's primary key is ``(workspace_id, id)`` (docs/citus.md) while Django knows
``id`` as the pk. Django groups an aggregate query by the pk alone and relies on PostgreSQL
knowing that the primary key determines the other columns; with ``id`` no longer the primary
key PostgreSQL refuses that, so the ORM lists every selected column in ``GROUP BY`` instead.

``is_citus`` says whether the database is a Citus coordinator, so the few statements whose
best form differs between the engines (``formation.bulk_insert``, this package's compiler)
take the one that Citus routes to a single shard, and the schema editor adds a column's check
as a named constraint there (``schema.py``).
"""

from django.db.backends.postgresql import base, features, operations
from django.utils.functional import cached_property

from formation.postgresql.schema import DatabaseSchemaEditor


class DatabaseFeatures(features.DatabaseFeatures):
    allows_group_by_selected_pks = False


class DatabaseOperations(operations.DatabaseOperations):
    compiler_module = "formation.postgresql.compiler"


class DatabaseWrapper(base.DatabaseWrapper):
    features_class = DatabaseFeatures
    ops_class = DatabaseOperations
    SchemaEditorClass = DatabaseSchemaEditor

    @cached_property
    def is_citus(self) -> bool:
        """Whether the Citus extension is installed (asked once per process and alias: a
        database does not change engine under a running service)."""
        self.ensure_connection()
        # psycopg's own cursor: no execute wrapper records it, no statement timeout bounds it;
        # its errors are Django's, as any statement's would be.
        with self.wrap_database_errors, self.connection.cursor() as cursor:
            cursor.execute("SELECT 1 FROM pg_extension WHERE extname = 'citus'")
            return cursor.fetchone() is not None
