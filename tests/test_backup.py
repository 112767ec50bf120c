"""A backup restores whole, and the database analyzes under any ``search_path``
(docs/operations.md, "Backups").

pg_restore, autovacuum and index maintenance run with an empty ``search_path``: a function body
that calls another of the schema's functions without naming the schema is not found there, so a
restore lost ``agent_memories`` (its generated column) and the projection's bucket index, and
autovacuum never analyzed the projection (its index expression). The first test fills a
database through the API and the services (every table of the apps holds rows, memories
included), dumps it with ``pg_dump -Fc``, restores it into a new database with ``pg_restore
--exit-on-error`` and holds the two equal: tables, each table's rows, indexes, constraints,
functions, triggers, sequences, and one search_history call answered alike on both.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from io import StringIO
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest
from django.apps import apps
from django.core.management import CommandError, call_command
from django.db import connection
from psycopg import sql

from formation.backups import differences, snapshot
from formation.embedded_postgres import find_bindir
from messages_app import services
from messages_app.management.commands.verify_restore import configured_database
from search_app.runs.services import run_create
from tests import factories
from tests.helpers import PROJECT_DIR

# One search_history call through the API, in a process of its own connected to the database
# named by DATABASE_URL; prints the answer as JSON.
SEARCH = """
import json, os, django
django.setup()
from rest_framework.test import APIClient
client = APIClient()
client.credentials(HTTP_AUTHORIZATION="Bearer " + os.environ["RUN_TOKEN"])
response = client.post("/api/v1/history/search", {"query": "deploy"}, format="json")
print(json.dumps({"status": response.status_code, "body": response.json()}))
"""


def _project_tables() -> list[str]:
    return sorted(
        model._meta.db_table
        for name in ("messages_app", "search_app", "audit_app")
        for model in apps.get_app_config(name).get_models(include_auto_created=True)
        if model._meta.managed
    )


def _connection_params(database: str) -> dict[str, str]:
    return {**configured_database(), "dbname": database}


def _libpq_env(database: str) -> dict[str, str]:
    """The environment pg_dump and pg_restore connect to ``database`` with."""
    return {
        **os.environ,
        **{f"PG{name.upper()}": value for name, value in _connection_params(database).items()},
        "PGDATABASE": database,
    }


def _database_url(database: str) -> str:
    params = _connection_params(database)
    credentials = quote(params.get("user", ""), safe="")
    if "password" in params:
        credentials += ":" + quote(params["password"], safe="")
    host, port = params.get("host", ""), params.get("port", "5432")
    if host.startswith("/"):
        return f"postgresql://{credentials}@/{database}?host={quote(host, safe='/')}&port={port}"
    return f"postgresql://{credentials}@{host}:{port}/{database}"


@contextmanager
def _restored_copy(source: str, dump: Path) -> Iterator[tuple[str, subprocess.CompletedProcess]]:
    """``source`` dumped to ``dump`` and restored into a new database, dropped afterwards."""
    bindir = find_bindir()
    target = f"{source}_restored_{uuid.uuid4().hex[:8]}"
    dumped = subprocess.run(
        [str(bindir / "pg_dump"), "-Fc", "--no-owner", "-f", str(dump)],
        env=_libpq_env(source),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert dumped.returncode == 0, dumped.stderr
    with psycopg.connect(**_connection_params(source), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(target)))
    try:
        restored = subprocess.run(
            [str(bindir / "pg_restore"), "--exit-on-error", "--no-owner", "-d", target, str(dump)],
            env=_libpq_env(target),
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        yield target, restored
    finally:
        with psycopg.connect(**_connection_params(source), autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(target))
            )


def _search(database: str, run_token: str) -> dict:
    """search_history answered by a process connected to ``database`` (the answer's own id and
    timing left out: they name the call, not what it found)."""
    env = {
        **os.environ,
        "DATABASE_URL": _database_url(database),
        "DJANGO_SETTINGS_MODULE": "formation.settings_test",
        "DATABASE_POOL": "0",
        "RUN_TOKEN": run_token,
        "ALLOWED_HOSTS": "testserver",
    }
    done = subprocess.run(
        [sys.executable, "-c", SEARCH],
        cwd=PROJECT_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.splitlines()[-1])


def _fill() -> str:
    """Every table of the apps given rows through the API and the services; the raw token of
    an open run that can search."""
    workspace = factories.make_workspace()
    agent = factories.make_agent(workspace)
    alice = factories.make_account(workspace, "Alice Example")
    bob = factories.make_account(workspace, "Bob Example")
    services.identity_link_create(
        workspace_id=workspace.id, account_id=alice.id, linked_account_id=bob.id
    )
    general = factories.make_conversation(workspace, "public", "general")
    direct = factories.make_conversation(workspace, "direct", "alice-dm")
    for member in (agent, alice, bob):
        factories.join(general, member, joined_at=factories.at(-600))
    for member in (agent, alice):
        factories.join(direct, member, joined_at=factories.at(-600))
    texts = (
        "the deploy of search_app/query/parse.py moved to Friday",
        "getUserById fails after the deploy, see PROJ-1234",
        "移行の計画 and the deploy checklist",
        "lunch is at noon",
    )
    for minute, text in enumerate(texts):
        factories.post(
            general, (alice, bob, agent)[minute % 3], text, created_at=factories.at(minute)
        )
    asked = factories.post(direct, alice, "when is the deploy?", created_at=factories.at(10))
    factories.hold_elsewhere(workspace)

    run, api = factories.make_run(agent, direct, alice, current=asked)
    searched = api.post("/api/v1/history/search", {"query": "deploy"}, format="json")
    assert searched.status_code == 200, searched.content
    remembered = api.post(
        f"/api/v1/runs/{run.id}/memories", {"content": "the deploy moved to Friday"}, format="json"
    )
    assert remembered.status_code == 201, remembered.content
    replied = api.post(f"/api/v1/runs/{run.id}/reply", {"content": "Friday."}, format="json")
    assert replied.status_code == 201, replied.content

    later = factories.post(direct, alice, "and the checklist?", created_at=factories.at(20))
    _, token = run_create(
        workspace_id=workspace.id,
        agent_id=agent.id,
        conversation_id=direct.id,
        requester_id=alice.id,
        current_message_id=later.id,
    )
    recalled = factories.bearer_client(token).get("/api/v1/memories", {"query": "deploy"})
    assert recalled.status_code == 200, recalled.content
    assert recalled.json()["items"], "the memory is recalled, so run_memories holds a row"
    return token


def test_a_backup_restores_every_table_row_index_and_constraint(transactional_db, tmp_path):
    token = _fill()
    source = connection.settings_dict["NAME"]
    before = snapshot(_connection_params(source))
    empty = [table for table in _project_tables() if not before.rows[table][0]]
    assert not empty, f"the fill left tables empty: {empty}"

    with _restored_copy(source, tmp_path / "formation.dump") as (target, restored):
        assert restored.returncode == 0, restored.stderr
        assert not restored.stderr
        after = snapshot(_connection_params(target))
        assert "agent_memories" in after.objects["table"]
        assert "search_document_bucket_gin" in after.objects["index"]
        assert after.rows == before.rows
        assert differences(_connection_params(source), _connection_params(target)) == []

        output = StringIO()
        call_command("verify_restore", _database_url(target), stdout=output)
        assert output.getvalue() == "The restored database holds what this one holds.\n"

        answers = {database: _search(database, token) for database in (source, target)}
    source_answer, target_answer = answers[source], answers[target]
    assert source_answer["status"] == 200, source_answer
    assert source_answer["body"]["items"], "the search finds what the fill wrote"
    assert target_answer == source_answer


def test_verify_restore_names_what_a_restore_lost(transactional_db, tmp_path):
    """A restored copy missing a memory and an index: both named, content never printed."""
    workspace = factories.make_workspace()
    agent = factories.make_agent(workspace)
    alice = factories.make_account(workspace, "Alice Example")
    room = factories.make_conversation(workspace, "direct", "dm")
    for member in (agent, alice):
        factories.join(room, member, joined_at=factories.at(-600))
    asked = factories.post(room, alice, "a confidential plan", created_at=factories.at(0))
    run, api = factories.make_run(agent, room, alice, current=asked)
    remembered = api.post(
        f"/api/v1/runs/{run.id}/memories", {"content": "a confidential memory"}, format="json"
    )
    assert remembered.status_code == 201, remembered.content
    source = connection.settings_dict["NAME"]
    with _restored_copy(source, tmp_path / "formation.dump") as (target, restored):
        assert restored.returncode == 0, restored.stderr
        with psycopg.connect(**_connection_params(target), autocommit=True) as conn:
            conn.execute("SET session_replication_role = replica")  # as a partial restore
            conn.execute("DELETE FROM agent_memories")
            conn.execute("DROP INDEX search_document_bucket_gin")

        output = StringIO()
        with pytest.raises(CommandError, match="differs in 2 places"):
            call_command("verify_restore", _database_url(target), stdout=output)
    assert output.getvalue().splitlines() == [
        "index search_document_bucket_gin: missing",
        "table agent_memories: 1 rows, 0 restored",
    ]
    assert "confidential" not in output.getvalue()


def test_every_table_analyzes_under_an_empty_search_path(transactional_db):
    """As autovacuum runs it, in a session of its own (a session that has already used the
    bucket index holds its expression inlined and would not notice): the projection's
    statistics include its document column."""
    workspace = factories.make_workspace()
    agent = factories.make_agent(workspace)
    room = factories.make_conversation(workspace, "public", "general")
    factories.join(room, agent)
    for number in range(20):
        factories.post(room, agent, f"status report {number} for getUserById in app/parse.py")
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_schema()")
        (schema,) = cursor.fetchone()

    params = _connection_params(connection.settings_dict["NAME"])
    with psycopg.connect(**params, options="-c search_path=pg_catalog", autocommit=True) as conn:
        for table in _project_tables():
            conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(schema, table)))
        analyzed = conn.execute(
            "SELECT attname FROM pg_stats WHERE schemaname = %s "
            "AND tablename = 'message_search_documents' AND attname = 'document'",
            [schema],
        ).fetchall()
    assert analyzed == [("document",)]
