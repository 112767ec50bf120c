"""Every statement of an agent tool call is routed to one shard (issue 17; docs/citus.md).

Runs only in the Citus suite (``make test-citus``): each case makes a real API call, records
every statement it ran with its parameters, and asks Citus to ``EXPLAIN`` each one again. A
statement Citus would run on more than one shard (or pull to the coordinator) fails the case,
naming it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from django.db import connection

from tests import factories

SKIPPED = re.compile(r"^\s*(BEGIN|COMMIT|ROLLBACK|SAVEPOINT|RELEASE|SET|RESET|SHOW)\b", re.I)


@contextmanager
def recorded() -> Iterator[list[tuple[str, object]]]:
    statements: list[tuple[str, object]] = []

    def record(execute, sql, params, many, context):
        if not SKIPPED.match(sql):
            statements.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        yield statements


# A plan node that reads a table (a function such as unnest or to_tsvector reads none).
READS_A_TABLE = re.compile(r"\b(Seq|Index|Index Only|Bitmap Heap|Tid|Sample) Scan\b")


def task_counts(sql: str, params: object) -> list[int] | None:
    """The ``Task Count`` of every distributed step of ``sql``'s plan; None for a statement
    that reads no table at all (the query's lexemes) or only Citus's metadata, which the
    coordinator answers alone."""
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + sql, params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    if "Citus" not in plan:
        # Citus's own metadata is the coordinator's to read (search_history's term statistics
        # look up the workspace's shard there, once per process every few minutes). A bitmap
        # index scan names only its index: the heap scan above it names the table.
        reads = [
            line
            for line in plan.splitlines()
            if READS_A_TABLE.search(line) and "Bitmap Index Scan" not in line
        ]
        assert all(" on pg_dist_" in line for line in reads), (
            f"a table read on the coordinator:\n{plan}"
        )
        return None
    return [int(n) for n in re.findall(r"Task Count: (\d+)", plan)]


def assert_single_shard(call: Callable[[], object]) -> list[str]:
    with recorded() as statements:
        call()
    assert statements, "the call ran no statement"
    routed = []
    for sql, params in statements:
        counts = task_counts(sql, params)
        if counts is None:
            continue
        assert counts, f"no distributed step for: {' '.join(sql.split())[:300]}"
        assert all(n == 1 for n in counts), f"{counts} tasks for: {' '.join(sql.split())[:300]}"
        routed.append(" ".join(sql.split())[:60])
    return routed


@pytest.fixture
def scene(db):
    workspace, agent, alice, public = factories.observed_public_room()
    # A second workspace, so a statement that forgets its workspace has more than one shard
    # to read.
    factories.other_workspace()
    messages = [factories.post(public, alice, f"routing sample {i}") for i in range(5)]
    run, run_client = factories.make_run(agent, public, alice)
    return {
        "workspace": workspace,
        "agent": agent,
        "alice": alice,
        "public": public,
        "messages": messages,
        "run": run,
        "run_client": run_client,
        "agent_client": factories.agent_client(agent),
        "service": factories.service_client(workspace),
    }


def ok(response, status=200):
    assert response.status_code == status, response.content
    return response


def test_list_messages(scene):
    client, room = scene["agent_client"], scene["public"]
    assert_single_shard(lambda: ok(client.get(f"/api/v1/messages?conversationId={room.id}")))
    anchor = scene["messages"][2].id
    assert_single_shard(
        lambda: ok(client.get(f"/api/v1/messages?conversationId={room.id}&before={anchor}"))
    )


def test_get_message(scene):
    client = scene["agent_client"]
    assert_single_shard(lambda: ok(client.get(f"/api/v1/messages/{scene['messages'][0].id}")))


def test_search_messages(scene):
    client = scene["agent_client"]
    assert_single_shard(lambda: ok(client.get("/api/v1/messages/search?query=routing")))


def test_search_history(scene):
    client = scene["run_client"]
    assert_single_shard(
        lambda: ok(client.post("/api/v1/history/search", {"query": "routing"}, format="json"))
    )


def test_the_reply_and_its_delivery_check(scene):
    client, run = scene["run_client"], scene["run"]
    ok(client.post("/api/v1/history/search", {"query": "routing"}, format="json"))
    assert_single_shard(
        lambda: ok(
            client.post(f"/api/v1/runs/{run.id}/reply", {"content": "Noted."}, format="json"),
            201,
        )
    )


def test_ingestion(scene):
    service, room, alice = scene["service"], scene["public"], scene["alice"]
    body = {"senderUserId": str(alice.id), "content": "routed ingest"}
    assert_single_shard(
        lambda: ok(
            service.post(f"/api/v1/conversations/{room.id}/messages", body, format="json"), 201
        )
    )
    bulk = {"messages": [{**body, "content": f"routed bulk {i}"} for i in range(20)]}
    assert_single_shard(
        lambda: ok(
            service.post(f"/api/v1/conversations/{room.id}/messages/bulk", bulk, format="json"),
            201,
        )
    )


def test_a_memory_written_and_recalled(scene):
    client, run = scene["run_client"], scene["run"]
    ok(client.post("/api/v1/history/search", {"query": "routing"}, format="json"))
    memories = f"/api/v1/runs/{run.id}/memories"
    assert_single_shard(
        lambda: ok(client.post(memories, {"content": "Routing noted."}, format="json"), 201)
    )
    assert_single_shard(lambda: ok(client.get("/api/v1/memories?query=routing")))
