"""Storing a message costs what its length says, whatever it holds (docs/search.md,
"Identifiers"; bench/storing_cost.py has the figures).

Identifier parts were found by joining a text's camelCase words to its document's lexemes, which
grew with the square of the text: 40,000 characters of camelCase code took 17 s to index, and a
long stack trace ran into the statement timeout. The first test stores 40,000 characters of
camelCase code, of a Java stack trace and of paths through the API, beside prose of the same
length, interleaved round by round, and holds each kind's median store within 3x prose's (a
ratio, not a time, so the machine's speed cancels out; nine rounds, so a store that happens to
merge a GIN index's pending list moves no median). The second stores 100,000 characters of each
(the largest message) under production's 10 s statement timeout.
"""

from __future__ import annotations

import statistics
import time

from django.db import connection

from synthetic.long_texts import KINDS, long_text
from tests import factories

ROUNDS = 9


def _store(api, room, agent, text: str) -> float:
    started = time.perf_counter()
    answer = api.post(
        f"/api/v1/conversations/{room.id}/messages",
        {"senderAgentId": str(agent.id), "content": text},
        format="json",
    )
    elapsed = time.perf_counter() - started
    assert answer.status_code == 201, answer.content[:200]
    return elapsed


def _room(workspace):
    agent = factories.make_agent(workspace)
    room = factories.make_conversation(workspace, "public", "pasted")
    factories.join(room, agent)
    return agent, room


def test_identifier_dense_text_costs_at_most_three_times_prose_of_its_length(db):
    workspace = factories.make_workspace()
    agent, room = _room(workspace)
    api = factories.service_client(workspace)
    texts = {kind: long_text(kind, 40_000) for kind in KINDS}
    seconds: dict[str, list[float]] = {kind: [] for kind in KINDS}
    for number in range(ROUNDS + 1):
        for kind in KINDS[number % len(KINDS) :] + KINDS[: number % len(KINDS)]:
            elapsed = _store(api, room, agent, texts[kind])
            if number:  # the first round warms the caches
                seconds[kind].append(elapsed)

    prose = statistics.median(seconds["prose"])
    ratios = {kind: round(statistics.median(seconds[kind]) / prose, 2) for kind in KINDS}
    assert all(ratio <= 3 for ratio in ratios.values()), ratios


def test_the_largest_message_of_every_kind_is_stored_within_the_statement_timeout(db, settings):
    settings.API_STATEMENT_TIMEOUT_MS = 10_000  # production's
    workspace = factories.make_workspace()
    agent, room = _room(workspace)
    api = factories.service_client(workspace)
    for kind in KINDS:
        _store(api, room, agent, long_text(kind, 100_000))
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM message_search_documents WHERE conversation_id = %s", [room.id]
        )
        assert cursor.fetchone() == (len(KINDS),)
