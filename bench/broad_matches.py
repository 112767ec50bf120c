"""search_history over a broad prefix and a fresh common word, each matching many messages.

    DATABASE_URL=postgresql://... .venv/bin/python bench/broad_matches.py \
        [--matches 15000] [--requests 5] [--inlined]

A new workspace gets ``--matches`` messages that each hold a different word starting ``vm``,
and as many that share a word PostgreSQL has no statistics for yet (no ANALYZE runs between
the insert and the searches, as in a workspace that has just imported its history). Each row
times search_history through the service (lock, scope, hits statement, evidence, audit), from
a new run per call, and prints the median and the slowest call.

``--inlined`` adds, interleaved call by call, the hits statement alone as it was before its
``weights`` CTE was materialised (PostgreSQL then recomputed the aggregate once per match), so
the two shapes are compared in one run; it is slow by design (seconds to minutes per call).
It writes to the database it measures: use a database made for it. All text is synthetic.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.django_setup import setup_django  # noqa: E402

setup_django("Set DATABASE_URL to a database made for benchmarking: this script writes to it.")

from django.db import connection  # noqa: E402

from messages_app.models import Conversation, Message  # noqa: E402
from messages_app.services import (  # noqa: E402
    account_create,
    agent_create,
    conversation_create,
    membership_join,
    workspace_create,
)
from search_app import services as search_services  # noqa: E402
from search_app.history.results import HistoryFilters  # noqa: E402
from search_app.history.statement import hits_statement  # noqa: E402
from search_app.query.parse import parse_query  # noqa: E402
from search_app.runs.services import run_create  # noqa: E402
from search_app.scope import run_scope  # noqa: E402

START = datetime(2026, 1, 1, tzinfo=UTC)
CASES = {
    "prefix `vm*`": ("'vm' || n || ' synthetic status'", "vm*"),
    "fresh word, no statistics": ("'zephyrine status number ' || n", "zephyrine"),
}


def _room(slug: str):
    workspace = workspace_create(slug=slug)
    person = account_create(workspace_id=workspace.id, display_name="Bench Person")
    agent = agent_create(workspace_id=workspace.id, name="Bench agent")
    room = conversation_create(workspace_id=workspace.id, kind="private", title="bench room")
    for member in ({"account_id": person.id}, {"agent_id": agent.id}):
        membership_join(conversation=room, joined_at=START - timedelta(days=1), **member)
    return person, agent, room


def _fill(room: Conversation, sender_id: uuid.UUID, count: int, content_sql: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            f"""INSERT INTO {Message._meta.db_table}
                    (id, workspace_id, conversation_id, seq, role, status,
                     sender_account_id, content, created_at)
                SELECT gen_random_uuid(), %s, %s, n, 'user', 'sent', %s, {content_sql},
                       %s::timestamptz + n * interval '1 second'
                FROM generate_series(1, %s) AS n""",
            [room.workspace_id, room.id, sender_id, START, count],
        )
    Conversation.objects.filter(pk=room.pk).update(last_seq=count, live_message_count=count)


def _run(person, agent, room):
    run, _ = run_create(
        workspace_id=room.workspace_id,
        agent_id=agent.id,
        conversation_id=room.id,
        requester_id=person.id,
        current_message_id=None,
        recent_message_ids=[],
        tool_scope="membership",
    )
    return run


def _service_ms(person, agent, room, query_text: str) -> float:
    run = _run(person, agent, room)
    started = time.perf_counter()
    search_services.search_history(
        workspace_id=room.workspace_id,
        run_id=run.id,
        query_text=query_text,
        filters=HistoryFilters(),
        limit=8,
    )
    return (time.perf_counter() - started) * 1000


def _inlined_ms(person, agent, room, query_text: str) -> float:
    """The hits statement alone with ``weights`` left to the planner, as before the fix."""
    run = _run(person, agent, room)
    scope, _ = run_scope(workspace_id=room.workspace_id, run_id=run.id, lock=None)
    query = parse_query(query_text, workspace_id=room.workspace_id)
    sql, params = hits_statement(scope, query, HistoryFilters(), limit=8, now=datetime.now(tz=UTC))
    sql = sql.replace("weights AS MATERIALIZED (", "weights AS (")
    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        cursor.fetchall()
    return (time.perf_counter() - started) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--matches", type=int, default=15_000, help="Matching messages per row.")
    parser.add_argument("--requests", type=int, default=5, help="Timed calls per row.")
    parser.add_argument(
        "--inlined", action="store_true", help="Also time the statement as it was (slow)."
    )
    args = parser.parse_args()
    print(f"{'case':<28} {'matches':>8} {'p50 ms':>9} {'max ms':>9}  side")
    for label, (content_sql, query_text) in CASES.items():
        slug = f"bench-broad-{uuid.uuid4().hex[:8]}"
        person, agent, room = _room(slug)
        _fill(room, person.id, args.matches, content_sql)
        sides = {"service": _service_ms}
        if args.inlined:
            sides["statement, weights inlined"] = _inlined_ms
        timings: dict[str, list[float]] = {side: [] for side in sides}
        for _ in range(args.requests):
            for side, measure in sides.items():
                timings[side].append(measure(person, agent, room, query_text))
        for side, values in timings.items():
            print(
                f"{label:<28} {args.matches:>8,} {statistics.median(values):>9.1f} "
                f"{max(values):>9.1f}  {side}"
            )


if __name__ == "__main__":
    main()
