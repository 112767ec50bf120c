"""The migrated database holds exactly the functions and triggers the apps' ``sql/`` files
declare (``messages_app/sql/triggers.sql``, ``search_app/sql/triggers.sql``,
``search_app/sql/search_document.sql``): the migrations are history, the files are where a
reader finds the current definitions.

The files are run in a scratch schema (their ``@schema@`` naming it), over bodiless copies of
the project's tables, and what PostgreSQL then prints for each function (``pg_get_functiondef``;
an aggregate's parts) and each trigger (``pg_get_triggerdef``) is compared with what it prints
for the migrated ones, schema names aside. A function or trigger on one side only is a
difference too. Everything is undone with the test's transaction.

Only the project's own objects are compared: functions that belong to no extension, and
triggers on the models' tables whose function belongs to no extension. On Citus that leaves out
Citus's own truncate triggers and the shards (other table names); the coordinator's catalog holds
the definitions as the migrations wrote them.
"""

from __future__ import annotations

import difflib
import re

from django.apps import apps
from django.db import connection

from formation.sql import in_schema
from tests.helpers import PROJECT_DIR

SQL_FILES = sorted(PROJECT_DIR.glob("*/sql/*.sql"))
SCRATCH = "formation_declared_sql"

# Functions and aggregates by name and argument types; an aggregate has no functiondef.
FUNCTIONS = """
SELECT p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ')',
       CASE WHEN p.prokind = 'a'
            THEN format('AGGREGATE %%s(%%s) KIND %%s SFUNC %%s STYPE %%s INITCOND %%L '
                        'FINALFUNC %%s COMBINEFUNC %%s PARALLEL %%s',
                        p.proname, pg_get_function_identity_arguments(p.oid), a.aggkind,
                        a.aggtransfn::regproc, a.aggtranstype::regtype, a.agginitval,
                        a.aggfinalfn::regproc, a.aggcombinefn::regproc, p.proparallel)
            ELSE pg_get_functiondef(p.oid) END
FROM pg_proc AS p
LEFT JOIN pg_aggregate AS a ON a.aggfnoid = p.oid
WHERE p.pronamespace = %(schema)s::regnamespace
  AND NOT EXISTS (SELECT 1 FROM pg_depend AS d
                  WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e')
"""

TRIGGERS = """
SELECT c.relname || '.' || t.tgname, pg_get_triggerdef(t.oid)
FROM pg_trigger AS t
JOIN pg_class AS c ON c.oid = t.tgrelid
WHERE c.relnamespace = %(schema)s::regnamespace AND c.relname = ANY (%(tables)s)
  AND NOT t.tgisinternal
  AND NOT EXISTS (SELECT 1 FROM pg_depend AS d
                  WHERE d.classid = 'pg_proc'::regclass AND d.objid = t.tgfoid
                    AND d.deptype = 'e')
"""


def _tables() -> list[str]:
    return sorted({model._meta.db_table for model in apps.get_models(include_auto_created=True)})


def _definitions(schema: str, schemas: tuple[str, ...]) -> dict[str, str]:
    """``{"function(args)" or "table.trigger": definition}`` in ``schema``, with every
    ``schemas`` qualifier removed (PostgreSQL qualifies what the search path does not show)."""
    qualifier = re.compile(rf"\b(?:{'|'.join(map(re.escape, schemas))})\.")
    with connection.cursor() as cursor:
        found = {}
        for statement in (FUNCTIONS, TRIGGERS):
            cursor.execute(statement, {"schema": schema, "tables": _tables()})
            found.update(cursor.fetchall())
    return {name: qualifier.sub("", definition) for name, definition in found.items()}


def differences(declarations: list[str]) -> dict[str, tuple[str | None, str | None]]:
    """``{name: (declared, migrated)}`` for every function or trigger the two disagree on."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_schema()")
        (migrated_schema,) = cursor.fetchone()
        cursor.execute(f"CREATE SCHEMA {SCRATCH}")
        for name in map(connection.ops.quote_name, _tables()):
            cursor.execute(f"CREATE TABLE {SCRATCH}.{name} (LIKE {migrated_schema}.{name})")
        # Only the scratch schema (and pg_catalog): a name the files use that it lacks fails
        # here instead of reaching the migrated tables.
        cursor.execute(f"SET LOCAL search_path = {SCRATCH}")
        for declaration in declarations:
            cursor.execute(in_schema(declaration, SCRATCH))
    schemas = (SCRATCH, migrated_schema)
    declared = _definitions(SCRATCH, schemas)
    migrated = _definitions(migrated_schema, schemas)
    return {
        name: (declared.get(name), migrated.get(name))
        for name in sorted(declared.keys() | migrated.keys())
        if declared.get(name) != migrated.get(name)
    }


def _report(found: dict[str, tuple[str | None, str | None]]) -> str:
    """Each difference as a diff from the files' definition to the migrated one."""
    return "\n".join(
        line
        for name, (declared, migrated) in found.items()
        for line in difflib.unified_diff(
            (declared or "").splitlines(),
            (migrated or "").splitlines(),
            f"{name} in the sql/ files" if declared else f"{name}: in no sql/ file",
            f"{name} migrated" if migrated else f"{name}: not in the database",
            lineterm="",
        )
    )


def test_the_database_holds_what_the_sql_files_declare(db):
    assert SQL_FILES
    found = differences([path.read_text(encoding="utf-8") for path in SQL_FILES])
    assert not found, _report(found)


def test_an_edited_body_and_an_undeclared_function_are_differences(db):
    """The comparison sees a body changed in a file, and a function no file declares."""
    edited = [
        path.read_text(encoding="utf-8").replace("RETURN NEW;", "RETURN NEW; -- edited", 1)
        if path.name == "triggers.sql" and path.parent.parent.name == "messages_app"
        else path.read_text(encoding="utf-8")
        for path in SQL_FILES
    ]
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE FUNCTION formation_undeclared() RETURNS integer LANGUAGE sql AS $$ SELECT 1 $$"
        )

    found = differences(edited)

    assert set(found) == {"formation_lineage_needs_agent_message()", "formation_undeclared()"}
    assert found["formation_undeclared()"][0] is None
