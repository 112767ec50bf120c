"""The text searches can be served by their indexes.

A few thousand messages in the agent's rooms and a rare needle: the shape where the GIN index
must win over reading the rooms' timelines. On so small a table the planner would still prefer
a sequential scan, so each test turns that off, and plain index scans too (``SET LOCAL``, for
the test's own transaction). An index that cannot serve the query (wrong expression, wrong
operator class, a query that no longer matches the indexed expression) is then still not
chosen, and the test fails. Synthetic text only.
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from messages_app import selectors, services
from search_app.runs.services import run_create
from tests.factories import history

pytestmark = pytest.mark.django_db

WORDS = ["amber", "falcon", "lantern", "meadow", "willow", "copper", "thistle", "beacon"]
HAYSTACK = 3_000
NEEDLES = 3


@pytest.fixture
def haystack(world) -> None:
    """Thousands of messages in the agent's private room, three needles, fresh statistics."""
    drafts = [
        services.MessageDraft(
            content=" ".join(WORDS[(index * 7 + k * 3) % len(WORDS)] for k in range(6)),
            sender_account_id=world.alice.id,
        )
        for index in range(HAYSTACK)
    ]
    drafts += [
        services.MessageDraft(content="granite harbor quartz", sender_account_id=world.bob.id)
    ] * NEEDLES
    services.messages_create(conversation=world.private, drafts=drafts)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE messages_app_message, message_search_documents")


def explain(sql: str, params: object = None) -> str:
    """The plan with only bitmap scans allowed: the GIN indexes' only kind of scan, so the
    question is whether they can serve the statement, not which btree today's statistics
    favour (other tests leave the planner's row counts behind)."""
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_indexscan = off")
        cursor.execute("SET LOCAL enable_indexonlyscan = off")
        cursor.execute("EXPLAIN " + sql, params)
        return "\n".join(row[0] for row in cursor.fetchall())


def test_search_history_hits_can_use_the_search_document_bucket_gin_index(world, haystack):
    run, _ = run_create(
        workspace_id=world.workspace.id,
        agent_id=world.agent.id,
        conversation_id=world.private.id,
        requester_id=world.alice.id,
    )
    with CaptureQueriesContext(connection) as captured:
        hits = history(run, "quartz harbor", limit=8).hits
    assert len(hits) == NEEDLES
    # The ranking statement: the one matching the query against the search documents.
    (statement,) = [query["sql"] for query in captured.captured_queries if "@@" in query["sql"]]
    plan = explain(statement)
    assert "search_document_bucket_gin" in plan


def test_search_messages_can_use_the_trigram_index(world, haystack):
    with CaptureQueriesContext(connection) as captured:
        found = selectors.message_search(
            workspace_id=world.workspace.id, agent_id=world.agent.id, query="NITE HARB", limit=20
        )
    assert len(found) == NEEDLES
    # Too rare for the newest-first walk, so the statement's second step searched the whole
    # history: that is the part the trigram index must serve. Reading rows is made dear, so a
    # scan of the whole room through another index cannot look cheaper than the few trigram
    # matches (left at its default, that choice followed other tests' leftover statistics).
    (statement,) = [query["sql"] for query in captured.captured_queries if "LIKE" in query["sql"]]
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL cpu_tuple_cost = 1")
    plan = explain(statement)
    assert "message_content_trgm" in plan


def test_search_messages_for_a_common_substring_can_walk_the_workspace_timeline(world, haystack):
    """A substring in most messages: the newest-first walk reads the newest visible messages
    through ``message_live_ws_timeline``. Only plain index scans are allowed here, so if the
    index no longer matches the statement's order (or is gone), nothing can serve it and the
    plan says so."""
    with CaptureQueriesContext(connection) as captured:
        found = selectors.message_search(
            workspace_id=world.workspace.id, agent_id=world.agent.id, query="LANTERN", limit=20
        )
    assert len(found) == 20
    # Found by the newest-first walk alone: one LIKE statement.
    (statement,) = [query["sql"] for query in captured.captured_queries if "LIKE" in query["sql"]]
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_bitmapscan = off")
        cursor.execute("SET LOCAL enable_sort = off")
        cursor.execute("EXPLAIN " + statement)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "message_live_ws_timeline" in plan
