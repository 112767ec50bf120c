"""Tenant rows in the ORM: joined and updated within their workspace (docs/citus.md).

Django joins a foreign key by its one column (``message.conversation_id = conversation.id``).
Both tables are distributed by ``workspace_id`` on Citus, which plans a join between them only
when the join also equates the distribution column; otherwise every ORM join (the admin's
lists and filters, ``select_related``, a filter across a relation) fails with "complex joins
are only supported when all distributed tables are co-located and joined on their distribution
columns". ``TenantForeignKey`` and ``TenantOneToOneField`` add ``AND <own>.workspace_id =
<target>.workspace_id`` to every join they make, forward and reverse. The condition is always
true (every tenant key is composite, ``(workspace_id, column)``; formation/tenant_keys.py), so
on plain PostgreSQL the rows are the same. The schema is a plain relation's: only the SQL of
joins differs, so migrations record the fields as ``ForeignKey`` and ``OneToOneField``.

Saving an existing ``TenantModel`` row never writes ``workspace_id``: a row never moves
between workspaces (its composite keys pin it), and Citus refuses an ``UPDATE`` that sets the
distribution column, even to the value it has.
"""

from __future__ import annotations

from typing import Any

from django.db import models
from django.db.models import QuerySet
from django.db.models.lookups import Exact
from django.db.models.sql.where import AND, WhereNode

from formation.errors import NotFound

WORKSPACE_COLUMN = "workspace_id"


def get_or_not_found(queryset: QuerySet, pk: object) -> Any:
    """One row of an already-scoped queryset, or the same ``NotFound`` as a missing one."""
    obj = queryset.filter(pk=pk).first()
    if obj is None:
        raise NotFound()
    return obj


def workspace_field(model: type[models.Model]) -> models.Field:
    """The model's ``workspace_id`` column: a foreign key to the workspace, or a plain copy."""
    return next(f for f in model._meta.concrete_fields if f.column == WORKSPACE_COLUMN)


class SameWorkspaceJoin:
    """Adds the workspace equality to every join of a relation field."""

    def deconstruct(self) -> tuple[str, str, list[Any], dict[str, Any]]:
        name, _, args, kwargs = super().deconstruct()
        return name, self.recorded_as, args, kwargs

    def get_extra_restriction(self, alias: str | None, related_alias: str) -> WhereNode | None:
        """``related_alias`` is this field's table, ``alias`` the target's (also for a reverse
        join, whose relation swaps them before calling this). Django passes no ``alias`` when
        it turns a multi-valued ``exclude()`` into a subquery; that subquery is then correlated
        by the key column alone."""
        if alias is None:
            return None
        own = workspace_field(self.model)
        target = workspace_field(self.related_model)
        same_workspace = Exact(own.get_col(related_alias), target.get_col(alias))
        return WhereNode([same_workspace], connector=AND)


class TenantForeignKey(SameWorkspaceJoin, models.ForeignKey):
    """A ``ForeignKey`` from a tenant table to another tenant table."""

    recorded_as = "django.db.models.ForeignKey"


class TenantOneToOneField(SameWorkspaceJoin, models.OneToOneField):
    """A ``OneToOneField`` from a tenant table to another tenant table."""

    recorded_as = "django.db.models.OneToOneField"


class TenantModel(models.Model):
    """A row of one workspace (a table with ``workspace_id``, distributed by it on Citus)."""

    class Meta:
        abstract = True

    def _do_update(
        self,
        base_qs: models.QuerySet,
        using: str,
        pk_val: Any,
        values: list,
        *args: Any,
        **kwargs: Any,
    ) -> bool:
        """The UPDATE of a saved row, without its workspace, and found by it as well as by its
        id when the workspace is loaded (so Citus sends it to the row's shard alone). Done in
        this step, the one of Django's ``save()`` that sees the columns it writes, rather than
        by setting ``update_fields``, so every other rule of ``save()`` stays Django's: an
        instance loaded with ``only()`` writes its loaded columns alone, in one statement, and a
        row deleted since it was read is inserted again."""
        values = [entry for entry in values if entry[0].column != WORKSPACE_COLUMN]
        workspace_id = self.__dict__.get(workspace_field(type(self)).attname)
        if workspace_id is not None:
            base_qs = base_qs.filter(**{WORKSPACE_COLUMN: workspace_id})
        return super()._do_update(base_qs, using, pk_val, values, *args, **kwargs)
