"""Django's PostgreSQL backend, told that a model's pk is not its table's primary key.

Every tenant table's primary key is ``(workspace_id, id)`` (docs/citus.md) while Django knows
``id`` as the pk. Django groups an aggregate query by the pk alone and relies on PostgreSQL
knowing that the primary key determines the other columns; with ``id`` no longer the primary
key PostgreSQL refuses that, so the ORM lists every selected column in ``GROUP BY`` instead.
"""

from django.db.backends.postgresql import base, features


class DatabaseFeatures(features.DatabaseFeatures):
    allows_group_by_selected_pks = False


class DatabaseWrapper(base.DatabaseWrapper):
    features_class = DatabaseFeatures
