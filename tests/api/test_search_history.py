"""The wire contract of ``POST /api/v1/history/search`` (SPEC §5, §6, §8).

Shapes and exact key sets, argument validation (every bad value is a 400 ``invalid_arguments``
in the error envelope), the run-token-only authorisation, workspace isolation and the rule that
no error ever echoes the query. Messages written "now" are observed by the agent, which joined
every ``world`` room at fixture time; dated messages use rooms joined long before. All text is
synthetic.
"""

from __future__ import annotations

import json
from datetime import timedelta, timezone

import pytest
from django.utils import timezone as django_timezone
from rest_framework.test import APIClient

from messages_app import services
from messages_app.models import Run
from search_app.history.ranking import WEIGHTS
from tests import factories
from tests.factories import SUMMARY_KEYS, at, other_workspace

pytestmark = pytest.mark.django_db

URL = "/api/v1/history/search"
CANARY = "canaryzq"
HIT_EXTRA_KEYS = {
    "conversation",
    "time",
    "speaker",
    "text",
    "highlights",
    "score",
    "reasons",
    "before",
    "after",
}
REASONS = ["text", "actor", "conversation", "participation", "recency", "speaker", "context"]


def rfc3339(value) -> str:
    return value.isoformat().replace("+00:00", "Z")


def search(client, body, **extra):
    return client.post(URL, body, format="json", **extra)


def assert_error(response, status: int, code: str) -> dict:
    assert response.status_code == status, response.content
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message", "details"}
    assert body["error"]["code"] == code
    assert isinstance(body["error"]["message"], str)
    assert isinstance(body["error"]["details"], dict)
    return body


def assert_invalid(response) -> dict:
    return assert_error(response, 400, "invalid_arguments")


def ids(response) -> list[str]:
    assert response.status_code == 200, response.content
    return [item["id"] for item in response.json()["items"]]


def as_ids(*messages) -> list[str]:
    return [str(message.id) for message in messages]


def assert_summary(summary: dict) -> None:
    """A message summary: the common keys plus exactly one sender key."""
    senders = {"senderUserId", "senderAgentId"} & set(summary)
    assert len(senders) == 1
    assert set(summary) == SUMMARY_KEYS | senders


@pytest.fixture
def run_client(world):
    """A run in the private room, asked by Alice, and a client holding its token."""
    return factories.make_run(world.agent, world.private, world.alice)


@pytest.fixture
def client(run_client):
    return run_client[1]


@pytest.fixture
def dated(world):
    """A private room the agent and Alice joined long ago, with three dated messages, posted
    apart so their neighbours (their context) are alike and only time orders them."""
    room = factories.make_conversation(world.workspace, "private", "dated")
    factories.join(room, world.agent, joined_at=at(-600))
    factories.join(room, world.alice, joined_at=at(-600))
    messages = [
        factories.post_apart(room, world.alice, "dated status", created_at=at(minute))
        for minute in (0, 10, 20)
    ]
    _, client = factories.make_run(world.agent, room, world.alice)
    return client, messages


# --- the response shape -------------------------------------------------------------------------


def test_response_shape_with_exact_keys_neighbours_and_budget(world, client):
    """items/total/budget, each hit with the summary keys plus the hit keys, nothing else."""
    room = world.private
    older = [
        factories.post(room, world.alice, "opening words"),
        factories.post(room, world.bob, "x"),
    ]
    hit = factories.post(room, world.alice, "needle status")
    newer = [
        factories.post(room, world.agent, "reply one"),
        factories.post(room, world.bob, "reply two"),
        factories.post(room, world.alice, "reply three"),
    ]

    response = search(client, {"query": "needle"})

    assert response.status_code == 200, response.content
    body = response.json()
    assert set(body) == {"items", "total", "budget"}
    assert body["total"] == len(body["items"]) == 1
    assert body["budget"] == {"used": 5, "limit": 400, "remaining": 395}
    (item,) = body["items"]
    assert set(item) == SUMMARY_KEYS | {"senderUserId"} | HIT_EXTRA_KEYS
    assert item["id"] == str(hit.id)
    assert item["conversationId"] == str(room.id)
    assert item["senderUserId"] == str(world.alice.id)
    assert item["seq"] == hit.seq
    assert item["role"] == "user"
    assert item["content"] == item["text"] == "needle status"
    assert item["time"] == item["createdAt"] == rfc3339(hit.created_at)
    assert item["conversation"] == {"id": str(room.id), "title": "planning", "kind": "private"}
    assert item["speaker"] == {
        "type": "user",
        "id": str(world.alice.id),
        "displayName": "Alice Example",
    }
    assert item["highlights"] == [[0, 6]]
    assert isinstance(item["score"], float)
    assert [reason["name"] for reason in item["reasons"]] == REASONS
    for reason in item["reasons"]:
        assert set(reason) == {"name", "value", "contribution"}
        assert reason["contribution"] == pytest.approx(
            WEIGHTS[reason["name"]] * reason["value"], abs=1e-6
        )
    assert abs(sum(r["contribution"] for r in item["reasons"]) - item["score"]) < 1e-6
    # Two eligible neighbours each side, in conversation order.
    assert [m["id"] for m in item["before"]] == as_ids(*older)
    assert [m["id"] for m in item["after"]] == as_ids(*newer[:2])
    for summary in [*item["before"], *item["after"]]:
        assert_summary(summary)
    assert "senderAgentId" in item["after"][0]
    assert [m["seq"] for m in item["before"] + item["after"]] == sorted(
        m["seq"] for m in item["before"] + item["after"]
    )


def test_agent_authored_hit_names_the_agent(world, client):
    """An agent's message: senderAgentId (not senderUserId) and an agent speaker."""
    message = factories.post(world.private, world.agent, "agentonly notice")

    (item,) = search(client, {"query": "agentonly"}).json()["items"]

    assert item["id"] == str(message.id)
    assert set(item) == SUMMARY_KEYS | {"senderAgentId"} | HIT_EXTRA_KEYS
    assert item["senderAgentId"] == str(world.agent.id)
    assert item["role"] == "assistant"
    assert item["speaker"] == {
        "type": "agent",
        "id": str(world.agent.id),
        "displayName": "Helper agent",
    }


def test_empty_result_is_a_valid_answer(client):
    """No match: an empty list, total 0, nothing spent."""
    response = search(client, {"query": "nothingmatcheshere"})

    assert response.status_code == 200
    assert response.json() == {
        "items": [],
        "total": 0,
        "budget": {"used": 0, "limit": 400, "remaining": 400},
    }


def test_budget_counts_distinct_evidence_across_searches(world, client):
    """A message returned twice counts once; remaining is limit - used."""
    for word in ("first", "second", "third", "fourth", "fifth"):
        factories.post(world.private, world.bob, f"budget {word}")

    one = search(client, {"query": "budget", "limit": 1}).json()["budget"]
    again = search(client, {"query": "budget", "limit": 1}).json()["budget"]
    everything = search(client, {"query": "budget"}).json()["budget"]

    assert one == {"used": 3, "limit": 400, "remaining": 397}  # the hit and two neighbours
    assert again == one
    assert everything == {"used": 5, "limit": 400, "remaining": 395}


def test_query_operators_and_quotes_are_plain_words(world, client):
    """tsquery syntax in the query never raises: it is just text."""
    message = factories.post(world.private, world.bob, "operator rollout")

    response = search(client, {"query": "operator & | ! : * ( ) ' \" \\ <-> rollout:* %_"})

    assert ids(response) == as_ids(message)


# --- limit ----------------------------------------------------------------------------------


@pytest.fixture
def many(world):
    """22 matching messages, more than the maximum limit."""
    return [factories.post(world.private, world.bob, f"plenty {i}") for i in range(22)]


@pytest.mark.parametrize(("limit", "expected"), [(None, 8), (1, 1), (8, 8), (20, 20)])
def test_limit_default_and_maximum(client, many, limit, expected):
    """Default 8 (also for null), at most 20, newest first among equal hits."""
    body = {"query": "plenty"} if limit is None else {"query": "plenty", "limit": limit}
    response = search(client, body)

    assert ids(response) == as_ids(*reversed(many))[:expected]
    assert response.json()["total"] == expected


def test_limit_null_means_default(client, many):
    """``null`` is "not given"."""
    assert len(ids(search(client, {"query": "plenty", "limit": None}))) == 8


@pytest.mark.parametrize("limit", [21, 100, 0, -1, "5", 5.5, True, False, [5], {"n": 5}])
def test_limit_out_of_range_or_wrong_type_is_invalid(client, many, limit):
    """More than 20, less than 1, or not a JSON whole number."""
    response = search(client, {"query": CANARY, "limit": limit})

    body = assert_invalid(response)
    assert "limit" in body["error"]["details"]["fields"]
    assert CANARY not in response.content.decode()


# --- speaker --------------------------------------------------------------------------------


@pytest.fixture
def voices(world):
    """The same words from Alice, from Carol (linked to Alice after writing), Bob and the agent."""
    carol = factories.make_account(world.workspace, "Carol Example")
    room = world.private
    said = {
        "alice": factories.post(room, world.alice, "voice check"),
        "carol": factories.post(room, carol, "voice check"),
        "bob": factories.post(room, world.bob, "voice check"),
        "agent": factories.post(room, world.agent, "voice check"),
    }
    link = services.identity_link_create(
        workspace_id=world.workspace.id, account_id=carol.id, linked_account_id=world.alice.id
    )
    services.identity_link_verify(link=link)
    return said


@pytest.mark.parametrize(
    ("speaker", "who"),
    [
        ("anyone", {"alice", "carol", "bob", "agent"}),
        (None, {"alice", "carol", "bob", "agent"}),
        ("requester", {"alice", "carol"}),
        ("you", {"agent"}),
    ],
)
def test_speaker_filter(client, voices, speaker, who):
    """requester = R and live-linked accounts (even for what they wrote before the link was
    verified); you = the run's agent; anyone (or null) = everyone."""
    body = {"query": "voice"} if speaker is None else {"query": "voice", "speaker": speaker}

    assert set(ids(search(client, body))) == {str(voices[name].id) for name in who}


def test_speaker_null_is_anyone(client, voices):
    """``null`` is "not given"."""
    assert len(ids(search(client, {"query": "voice", "speaker": None}))) == 4


@pytest.mark.parametrize("speaker", ["me", "Requester", "agent", "", "all", 1, True, ["you"]])
def test_unknown_speaker_is_invalid(client, voices, speaker):
    response = search(client, {"query": CANARY, "speaker": speaker})

    body = assert_invalid(response)
    assert "speaker" in body["error"]["details"]["fields"]
    assert CANARY not in response.content.decode()


# --- after / before -------------------------------------------------------------------------


def test_after_and_before_bound_hits_strictly(dated):
    """Both bounds are exclusive; any zone offset and fractional seconds are understood."""
    client, (m0, m10, m20) = dated
    plus_two = timezone(timedelta(hours=2))
    micro = timedelta(microseconds=1)

    def found(**bounds):
        return ids(search(client, {"query": "dated", **bounds}))

    assert found() == as_ids(m20, m10, m0)
    assert found(after=rfc3339(at(0))) == as_ids(m20, m10)
    assert found(before=rfc3339(at(20))) == as_ids(m10, m0)
    assert found(after=rfc3339(at(0)), before=rfc3339(at(20))) == as_ids(m10)
    assert found(after=at(10).astimezone(plus_two).isoformat()) == as_ids(m20)
    assert found(after=rfc3339(at(10) - micro)) == as_ids(m20, m10)
    assert found(before=rfc3339(at(10) + micro)) == as_ids(m10, m0)
    assert found(after=rfc3339(at(10)).replace("Z", "z")) == as_ids(m20)
    assert found(after=None, before=None) == as_ids(m20, m10, m0)


@pytest.mark.parametrize(
    "value",
    [
        "2026-01-02",
        "2026-01-02T03:04:05",
        "2026-01-02T03:04:05+0200",
        "2026-13-01T00:00:00Z",
        "2026-01-32T00:00:00Z",
        "02/01/2026 03:04:05Z",
        "yesterday",
        "",
        1767323045,
        True,
        ["2026-01-02T03:04:05Z"],
    ],
)
@pytest.mark.parametrize("field", ["after", "before"])
def test_bad_timestamps_are_invalid(client, field, value):
    """RFC 3339 with a zone, or nothing."""
    response = search(client, {"query": CANARY, field: value})

    body = assert_invalid(response)
    assert field in body["error"]["details"]["fields"]
    assert CANARY not in response.content.decode()


@pytest.mark.parametrize(("after", "before"), [(10, 10), (20, 10)])
def test_after_not_before_before_is_invalid(client, after, before):
    """An empty or inverted window is a mistake, not an empty result."""
    response = search(
        client, {"query": CANARY, "after": rfc3339(at(after)), "before": rfc3339(at(before))}
    )

    assert_invalid(response)
    assert CANARY not in response.content.decode()


# --- body and query validation --------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        {"query": CANARY, "conversationId": "x"},
        {"query": CANARY, "Query": CANARY},
        {"query": CANARY, "limit": 5, "offset": 0},
        {"query": CANARY, "requesterId": "someone"},
    ],
)
def test_unknown_fields_are_invalid(client, body):
    response = search(client, body)

    assert_invalid(response)
    assert CANARY not in response.content.decode()


@pytest.mark.parametrize(
    "raw", ['["canaryzq"]', '"canaryzq"', "5", "null", "true", "{", "{'q': 1}"]
)
def test_non_object_or_malformed_body_is_invalid(client, raw):
    response = client.post(URL, raw, content_type="application/json")

    assert_invalid(response)
    assert CANARY not in response.content.decode()


def test_empty_body_and_query_string_parameters_are_invalid(client):
    """The query is required; parameters belong in the body, never the query string."""
    assert_invalid(client.post(URL, "", content_type="application/json"))
    assert_invalid(client.post(f"{URL}?limit=5", {"query": "x"}, format="json"))
    assert_invalid(client.post(f"{URL}?query={CANARY}", {"query": "x"}, format="json"))


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"limit": 5},
        {"query": None},
        {"query": 5},
        {"query": True},
        {"query": [CANARY]},
        {"query": {"text": CANARY}},
        {"query": (CANARY + " ") * 56},  # 504 characters
        {"query": "x" * 501},
        {"query": ""},
        {"query": "   "},
        {"query": "the and of"},
        {"query": "IS it THE"},
        {"query": "!!! *** ???"},
    ],
)
def test_bad_queries_are_invalid_and_never_echoed(client, body):
    response = search(client, body)

    assert_invalid(response)
    text = response.content.decode()
    assert CANARY not in text
    assert "***" not in text
    assert "the and of" not in text


def test_query_of_exactly_500_characters_is_accepted(world, client):
    """The limit is inclusive."""
    message = factories.post(world.private, world.bob, "boundary word")
    query = ("boundary " * 56)[:500]
    assert len(query) == 500

    assert ids(search(client, {"query": query})) == as_ids(message)


# --- authorisation --------------------------------------------------------------------------


def test_no_token_is_unauthenticated(world):
    response = search(APIClient(), {"query": CANARY})

    assert_error(response, 401, "unauthenticated")
    assert CANARY not in response.content.decode()


def test_bad_token_is_unauthenticated(world):
    response = search(factories.bearer_client("not-a-real-token"), {"query": CANARY})

    assert_error(response, 401, "unauthenticated")


def test_agent_token_is_forbidden(world):
    """search_history needs a run: an agent token alone has no destination or requester."""
    factories.post(world.private, world.bob, "sample status")
    response = search(world.agent_api, {"query": CANARY})

    assert_error(response, 403, "forbidden")
    assert CANARY not in response.content.decode()


def test_service_token_is_forbidden(world):
    response = search(world.service, {"query": CANARY})

    assert_error(response, 403, "forbidden")


def test_finished_run_is_forbidden(world, run_client):
    """Once the runtime closes the run, its token no longer opens the tools."""
    run, client = run_client
    factories.post(world.private, world.bob, "sample status")
    assert ids(search(client, {"query": "sample"}))
    Run.objects.filter(pk=run.pk).update(finished_at=django_timezone.now())

    response = search(client, {"query": CANARY})

    assert_error(response, 403, "forbidden")
    assert CANARY not in response.content.decode()


@pytest.mark.parametrize("method", ["get", "put", "patch", "delete"])
def test_other_methods_are_not_allowed(client, method):
    response = getattr(client, method)(URL)

    assert_error(response, 405, "method_not_allowed")


def test_run_token_sees_only_its_own_workspace(world):
    """Two tenants with matching messages: each run finds only its own."""
    here = factories.post(world.private, world.alice, "sample status here")
    workspace, agent, room, there = other_workspace()
    requester = factories.make_account(workspace, "Dana Example")
    _, elsewhere_client = factories.make_run(agent, room, requester)
    _, here_client = factories.make_run(world.agent, world.private, world.alice)

    there_body = search(elsewhere_client, {"query": "sample status"}).json()
    here_body = search(here_client, {"query": "sample status"}).json()

    assert [item["id"] for item in there_body["items"]] == as_ids(there)
    assert [item["id"] for item in here_body["items"]] == as_ids(here)
    assert str(here.id) not in json.dumps(there_body)
    assert str(there.id) not in json.dumps(here_body)


# --- ids of messages the run may not receive ------------------------------------------------------


def _references(item: dict) -> tuple[str | None, str | None]:
    return item["replyToId"], item["threadId"]


def test_a_reference_to_a_message_the_run_may_not_receive_is_null():
    """replyToId and threadId name only messages the run could be given (rules 1-4, or its
    prompt); a parent written before the agent joined, or deleted since, is null in hits and
    in neighbours, while list_messages (membership-scoped) still shows it."""
    workspace = factories.make_workspace()
    agent = factories.make_agent(workspace)
    alice = factories.make_account(workspace)
    room = factories.make_conversation(workspace, "private")
    factories.join(room, alice, joined_at=at(-100))
    unseen = factories.post(room, alice, "sample before the agent", created_at=at(-50))
    factories.join(room, agent, joined_at=at(-10))
    seen = factories.post(room, alice, "sample seen parent", created_at=at(1))
    gone = factories.post(room, alice, "sample gone parent", created_at=at(2))
    prompt = factories.post(room, alice, "sample prompt parent", created_at=at(3))
    hit_unseen = factories.post(
        room, alice, "needleword one", created_at=at(4), reply_to_id=unseen.id, thread_id=unseen.id
    )
    hit_seen = factories.post(
        room, alice, "needleword two", created_at=at(5), reply_to_id=seen.id, thread_id=seen.id
    )
    hit_gone = factories.post(
        room, alice, "needleword three", created_at=at(6), reply_to_id=gone.id
    )
    hit_prompt = factories.post(
        room, alice, "needleword four", created_at=at(7), reply_to_id=prompt.id
    )
    neighbour = factories.post(
        room, alice, "sample neighbour", created_at=at(8), reply_to_id=unseen.id
    )
    services.message_delete(message=gone)
    _, client = factories.make_run(agent, room, alice, current=prompt)

    response = search(client, {"query": "needleword", "limit": 20})
    assert response.status_code == 200, response.content
    items = {item["id"]: item for item in response.json()["items"]}
    assert _references(items[str(hit_unseen.id)]) == (None, None)
    assert _references(items[str(hit_seen.id)]) == (str(seen.id), str(seen.id))
    assert _references(items[str(hit_gone.id)]) == (None, None)
    assert _references(items[str(hit_prompt.id)]) == (str(prompt.id), None)
    (after,) = items[str(hit_prompt.id)]["after"]
    assert after["id"] == str(neighbour.id)
    assert _references(after) == (None, None)
    # The membership-scoped tools keep showing what membership allows.
    listed = client.get("/api/v1/messages", {"conversationId": str(room.id), "limit": 1})
    assert listed.json()["items"][0]["replyToId"] == str(unseen.id)
