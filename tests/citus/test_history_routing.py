"""search_history's statement is routed whole to the workspace's shard (issue 44; docs/citus.md).

Runs only in the Citus suite (``make test-citus``). A statement Citus cannot route it plans CTE
by CTE, each a distributed step of one task (which ``test_single_shard`` alone would accept)
whose rows come back as an intermediate result, and there the walks (a recursive CTE) cannot
run at all. So the hits statement's plan must be one task and nothing else, with the walk's
``Recursive Union`` inside that task, and the writes that follow it must record what the answer
returned. Synthetic text only.
"""

from __future__ import annotations

import re

import pytest
from django.db import connection

from audit_app.models import ConversationSearchEvent, SearchTool
from messages_app.models import RunEvidence
from search_app.history import terms
from search_app.query.parse import parse_query
from tests import factories
from tests.citus.test_single_shard import ok, recorded


@pytest.fixture
def scene(db):
    workspace, agent, alice, public = factories.observed_public_room()
    # A second workspace, so a statement that forgets its workspace has more than one shard.
    factories.other_workspace()
    for i in range(6):
        factories.post(public, alice, f"routing sample {i} about the harbour")
    run, run_client = factories.make_run(agent, public, alice)
    return {"workspace": workspace, "run": run, "run_client": run_client}


def hits_statement_plan(client, query: str) -> str:
    """The coordinator's plan of the hits statement of one search_history call (rolled back,
    so nothing it would record is written twice)."""
    with recorded() as statements:
        ok(client.post("/api/v1/history/search", {"query": query}, format="json"))
    found = [(sql, params) for sql, params in statements if "rare_matches AS MATERIALIZED" in sql]
    assert len(found) == 1, [" ".join(sql.split())[:60] for sql, _ in statements]
    sql, params = found[0]
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + sql, params)
        return "\n".join(row[0] for row in cursor.fetchall())


def test_the_hits_statement_is_one_task_with_its_walks(scene):
    plan = hits_statement_plan(scene["run_client"], "harbour routing")
    assert re.findall(r"Task Count: (\d+)", plan) == ["1"], plan
    assert "Subplan" not in plan, plan
    assert "intermediate_result" not in plan, plan
    assert "Recursive Union" in plan, plan


def test_the_writes_after_it_record_what_it_answered(scene):
    client, run = scene["run_client"], scene["run"]
    answer = ok(client.post("/api/v1/history/search", {"query": "harbour"}, format="json")).json()
    hits = [item["id"] for item in answer["items"]]
    assert hits
    evidence = RunEvidence.objects.filter(workspace_id=run.workspace_id, run_id=run.id)
    event = ConversationSearchEvent.objects.get(
        workspace_id=run.workspace_id, run_id=run.id, tool=SearchTool.SEARCH_HISTORY
    )
    assert [str(id) for id in event.hit_ids] == hits
    assert event.budget_used == evidence.count() == answer["budget"]["used"]
    assert event.result_count == len(hits)
    assert [ranking["messageId"] for ranking in event.rankings] == hits
    recorded_ids = {str(id) for id in evidence.values_list("message_id", flat=True)}
    assert recorded_ids == set(hits) | {str(id) for id in event.neighbour_ids}
    # A second call brings nothing new: no evidence twice, its event says so.
    ok(client.post("/api/v1/history/search", {"query": "harbour"}, format="json"))
    assert evidence.count() == event.budget_used
    latest = ConversationSearchEvent.objects.filter(
        workspace_id=run.workspace_id, run_id=run.id
    ).order_by("-created_at")[0]
    assert latest.budget_used == event.budget_used


@pytest.mark.django_db(transaction=True)
def test_the_routes_read_the_statistics_of_the_workspaces_shard():
    """The coordinator's table is an empty shell without statistics: a word in every message
    of the workspace would take the ``all`` route there; its shard's statistics (committed:
    another connection reads them) walk it."""
    workspace, _, alice, public = factories.observed_public_room()
    for i in range(6):
        factories.post(public, alice, f"routing sample {i} about the harbour")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE message_search_documents")
    terms.forget_frequencies()
    known = terms.frequencies(workspace.id)
    query = parse_query("harbour routing", workspace_id=workspace.id)
    assert terms.routes(query, known) == (terms.SLICES, terms.SLICES)
