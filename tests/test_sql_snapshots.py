"""The SQL each agent tool sends, compared with the snapshots in ``tests/sql_snapshots/``.

A restructuring of the statement builders (issue 26) must leave this text as it is, or show
in review exactly how it changed: each snapshot is every statement one API call runs, in order,
whitespace collapsed, as Django hands it to psycopg (parameters stay placeholders). The calls go
through the API with an agent token and with a run token (whose lens adds the run's rules), so
authentication, the statement timeout and the audit are in them too.

After an intended change, write the snapshots again and review their diff:

    FORMATION_UPDATE_SQL_SNAPSHOTS=1 .venv/bin/pytest tests/test_sql_snapshots.py
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from django.db import connection

from search_app.history.terms import forget_frequencies
from tests import factories

SNAPSHOTS = Path(__file__).parent / "sql_snapshots"
UPDATE = os.environ.get("FORMATION_UPDATE_SQL_SNAPSHOTS") == "1"
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
# Django names a savepoint after its thread and a counter of the process's savepoints.
SAVEPOINT = re.compile(r'"s\d+_x\d+"')


def statements_of(call: Callable[[], object]) -> str:
    """Every statement ``call`` runs, one per paragraph, whitespace collapsed, savepoint names
    made constant; an id written into the text rather than passed (none should be) would show
    as ``<uuid>``."""
    seen: list[str] = []

    def record(execute, sql, params, many, context):
        text = UUID.sub("<uuid>", " ".join(sql.split()))
        seen.append(SAVEPOINT.sub('"<savepoint>"', text))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        response = call()
    assert response.status_code in (200, 201), response.content
    return "\n\n".join(seen) + "\n"


def matches_snapshot(name: str, text: str) -> None:
    path = SNAPSHOTS / f"{name}.sql"
    if UPDATE:
        SNAPSHOTS.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"no snapshot {path.name}: write it with FORMATION_UPDATE_SQL_SNAPSHOTS=1"
    assert text == path.read_text(), f"{path.name} changed; review it and write it again"


@pytest.fixture
def scene(world):
    """A question in the private room, a public message and a run answering the question."""
    question = factories.post(world.private, world.alice, "sample orbit question")
    public = factories.post(world.public, world.bob, "sample orbit launch notes")
    run, run_api = factories.make_run(world.agent, world.private, world.alice, current=question)
    return world, question, public, run, run_api


@pytest.mark.django_db
@pytest.mark.parametrize("token", ["agent", "run"])
def test_the_membership_tools_send_the_statements_of_their_snapshots(scene, token):
    world, _, public, _, run_api = scene
    api = world.agent_api if token == "agent" else run_api
    calls = {
        "get_message": lambda: api.get(f"/api/v1/messages/{public.id}"),
        "list_messages": lambda: api.get(f"/api/v1/messages?conversationId={world.public.id}"),
        "list_messages_around": lambda: api.get(
            f"/api/v1/messages?conversationId={world.public.id}&after={public.id}"
        ),
        "search_messages": lambda: api.get("/api/v1/messages/search?query=orbit"),
    }
    for name, call in calls.items():
        matches_snapshot(f"{name}_{token}_token", statements_of(call))


@pytest.mark.django_db
def test_search_history_memories_and_the_reply_send_the_statements_of_their_snapshots(scene):
    _, _, _, run, run_api = scene
    # The statistics are read once a process per interval: forget them so the snapshot holds
    # that read whichever test searched first.
    forget_frequencies()
    matches_snapshot(
        "search_history",
        statements_of(
            lambda: run_api.post("/api/v1/history/search", {"query": "orbit launch"}, format="json")
        ),
    )
    matches_snapshot(
        "memory_create",
        statements_of(
            lambda: run_api.post(
                f"/api/v1/runs/{run.id}/memories", {"content": "sample orbit memory"}, format="json"
            )
        ),
    )
    matches_snapshot(
        "memory_search", statements_of(lambda: run_api.get("/api/v1/memories?query=orbit"))
    )
    matches_snapshot(
        "run_reply",
        statements_of(
            lambda: run_api.post(
                f"/api/v1/runs/{run.id}/reply", {"content": "sample answer"}, format="json"
            )
        ),
    )
