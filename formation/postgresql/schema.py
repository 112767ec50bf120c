"""Django's PostgreSQL schema editor, with the one change a migration needs on a Citus
cluster whose tables are already distributed.

Django adds a column that carries a check (a ``PositiveIntegerField``, say) in one statement,
``ADD COLUMN n integer CHECK (n >= 0)``, and leaves the constraint to be named by PostgreSQL.
Citus refuses that on a distributed table ("all constraints in Citus must have explicit
names"), so on Citus the column is added first and the check after it, under the name Django
itself gives a check it adds to an existing column.
"""

from __future__ import annotations

from django.db.backends.postgresql import schema
from django.db.models import Field, Model


class DatabaseSchemaEditor(schema.DatabaseSchemaEditor):
    def add_field(self, model: type[Model], field: Field) -> None:
        check = field.db_parameters(connection=self.connection)["check"]
        if not check or not self.connection.is_citus:
            super().add_field(model, field)
            return
        inline_check = self.sql_check_constraint
        self.sql_check_constraint = ""
        try:
            super().add_field(model, field)
        finally:
            self.sql_check_constraint = inline_check
        name = self._create_index_name(model._meta.db_table, [field.column], suffix="_check")
        self.execute(self._create_check_sql(model, name, check))
