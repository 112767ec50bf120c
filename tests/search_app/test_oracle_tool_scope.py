"""The membership tools of run tokens against the plain-Python oracle of SPEC §3.

The worlds, the oracle and the builder are ``test_oracle``'s. For every run of a world, one run
token of each tool scope reads every conversation the agent is a current member of with
list_messages, searches them all with search_messages and fetches every planned message with
get_message:

- under ``toolScope: deliverable`` the three tools return exactly the messages the oracle
  allows (rules 1 to 5 for the run's destination), newest first, with totals that count only
  those, and ``not_found`` for every other message;
- under the default scope they return what membership allows, and each message's
  ``deliverable`` is the final delivery check's verdict on it (rules 1 to 4, the oracle's
  ``delivery_reason``).
"""

from __future__ import annotations

import pytest
from django.db import transaction
from hypothesis import HealthCheck, event, given, settings

from tests import factories
from tests.search_app.test_oracle import (
    AGENT,
    INTERVAL_EDGES,
    LINKS_DO_NOT_CHAIN,
    Oracle,
    Plan,
    build,
    delivery_reason,
    worlds,
)

EXAMPLES = 30
LIST_URL = "/api/v1/messages"
SEARCH_URL = "/api/v1/messages/search"


class _Rollback(Exception):
    """Raised to undo one example's world."""


def current_rooms(plan: Plan) -> list[int]:
    """The rooms the run's agent is a member of now: the only ones its tools read."""
    return [
        room
        for room in range(len(plan.kinds))
        if plan.memberships[room, AGENT] and plan.memberships[room, AGENT][-1][1] is None
    ]


def newest_first(plan: Plan, indexes) -> list[int]:
    """created_at descending, then seq (plan order within a room) descending."""
    return sorted(indexes, key=lambda i: (plan.messages[i].minute, i), reverse=True)


def listed(client, room) -> dict:
    response = client.get(LIST_URL, {"conversationId": str(room.id), "limit": 200})
    assert response.status_code == 200, response.content
    return response.json()


def check_runs(plan: Plan, built, run_plan, oracle: Oracle) -> tuple[int, int]:
    """Both scopes of one run against the oracle; how many messages the default scope flagged
    undeliverable and how many the deliverable scope showed."""
    messages, rooms = built.messages, built.conversations
    index_of = {str(message_id): index for message_id, index in built.index_of.items()}
    make = {
        "current": messages[run_plan.current] if run_plan.current is not None else None,
        "recent": tuple(messages[i] for i in run_plan.recent),
    }
    args = (built.agents[0], rooms[run_plan.destination], built.accounts[run_plan.requester])
    _, strict = factories.make_run(*args, **make, tool_scope="deliverable")
    _, default = factories.make_run(*args, **make)
    readable = current_rooms(plan)
    live = [i for i in range(len(messages)) if i not in plan.deleted]
    allowed = {i for i in live if oracle.eligible(i) and plan.messages[i].conversation in readable}

    for room in readable:
        in_room = [i for i in live if plan.messages[i].conversation == room]
        body = listed(strict, rooms[room])
        want = newest_first(plan, [i for i in in_room if i in allowed])
        assert [index_of[item["id"]] for item in body["items"]] == want
        assert body["total"] == len(want)
        assert all(item["deliverable"] is True for item in body["items"])

        body = listed(default, rooms[room])
        assert [index_of[item["id"]] for item in body["items"]] == newest_first(plan, in_room)
        assert body["total"] == len(in_room)
        for item in body["items"]:
            index = index_of[item["id"]]
            assert item["deliverable"] is (delivery_reason(oracle, index) is None), index

    for client, want in ((strict, allowed), (default, None)):
        response = client.get(SEARCH_URL, {"query": "sample", "limit": 100})
        assert response.status_code == 200, response.content
        items = response.json()["items"]
        got = {index_of[item["id"]]: item["deliverable"] for item in items}
        if want is None:
            assert set(got) == {i for i in live if plan.messages[i].conversation in readable}
            assert got == {i: delivery_reason(oracle, i) is None for i in got}
            undeliverable = sum(not flag for flag in got.values())
        else:
            assert set(got) == want
            assert all(got.values())

    for index, message in enumerate(messages):
        response = strict.get(f"/api/v1/messages/{message.id}")
        if index in allowed:
            assert response.status_code == 200, index
            assert response.json()["deliverable"] is True
        else:
            assert response.status_code == 404, index
            assert response.json()["error"]["code"] == "not_found"
    return undeliverable, len(allowed)


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(plan=worlds())
@pytest.mark.django_db
def test_membership_tools_under_each_tool_scope_agree_with_the_oracle(plan):
    try:
        with transaction.atomic():
            built = build(plan)
            for run_plan in plan.runs():
                undeliverable, shown = check_runs(plan, built, run_plan, Oracle(plan, run_plan))
                event(f"membership scope: {min(undeliverable, 4)} undeliverable")
                event(f"deliverable scope: {min(shown, 4)} shown")
            raise _Rollback
    except _Rollback:
        pass


@pytest.mark.django_db
@pytest.mark.parametrize("plan", [LINKS_DO_NOT_CHAIN, INTERVAL_EDGES], ids=["links", "intervals"])
def test_the_hand_written_worlds(plan):
    built = build(plan)
    for run_plan in plan.runs():
        check_runs(plan, built, run_plan, Oracle(plan, run_plan))
