"""The three agent tools over HTTP: list_messages, get_message and search_messages (SPEC §5).

Every tool is exercised with an agent token and with a run token (the run's agent). Timestamps are
explicit so that "newest first" is deterministic; content is synthetic.
"""

from __future__ import annotations

import uuid

import pytest
from rest_framework.test import APIClient

from messages_app import services
from messages_app.models import Message
from search_app.runs.services import run_create
from tests import factories
from tests.factories import SUMMARY_KEYS, at, left_room, never_joined_room, other_workspace

pytestmark = pytest.mark.django_db

LIST_URL = "/api/v1/messages"
SEARCH_URL = "/api/v1/messages/search"
PAGE_KEYS = {"items", "total", "limit", "offset", "hasOlder", "hasNewer"}


def message_url(message_id) -> str:
    return f"/api/v1/messages/{message_id}"


def ids(response) -> list[str]:
    return [item["id"] for item in response.json()["items"]]


def as_ids(messages: list[Message]) -> list[str]:
    return [str(message.id) for message in messages]


def list_messages(api, conversation, **params):
    return api.get(LIST_URL, {"conversationId": str(conversation.id), **params})


def search(api, **params):
    return api.get(SEARCH_URL, params)


def assert_error(response, status: int, code: str) -> None:
    assert response.status_code == status, response.content
    body = response.json()
    assert set(body) == {"error"}
    assert body["error"]["code"] == code
    assert isinstance(body["error"]["message"], str)
    assert isinstance(body["error"]["details"], dict)


def assert_invalid(response) -> None:
    assert_error(response, 400, "invalid_arguments")


def assert_not_found(response) -> None:
    assert_error(response, 404, "not_found")


@pytest.fixture(params=["agent", "run"])
def tool_api(request, world):
    """The world's agent, through its own agent token or through a run token."""
    if request.param == "agent":
        world.agent_api.is_run = False
        return world.agent_api
    _, token = run_create(
        workspace_id=world.workspace.id,
        agent_id=world.agent.id,
        conversation_id=world.public.id,
        requester_id=world.alice.id,
    )
    client = factories.bearer_client(token)
    client.is_run = True
    return client


def summary(tool_api, item: dict) -> dict:
    """A message summary without its ``deliverable`` flag, which a run token's summaries carry
    (a boolean) and an agent token's never do."""
    item = dict(item)
    flag = item.pop("deliverable", None)
    assert isinstance(flag, bool) if tool_api.is_run else flag is None
    return item


# --- list_messages: default (timestamp/offset) mode -------------------------------------------


def test_list_is_newest_first_with_page_fields(tool_api, world, timeline):
    response = list_messages(tool_api, world.private)

    assert response.status_code == 200, response.content
    body = response.json()
    assert set(body) == PAGE_KEYS
    assert ids(response) == as_ids(timeline[::-1])
    assert body["total"] == 6
    assert body["limit"] == 50
    assert body["offset"] == 0
    assert body["hasOlder"] is False
    assert body["hasNewer"] is False


def test_list_items_are_message_summaries(tool_api, world, timeline):
    body = list_messages(tool_api, world.private, limit=1).json()

    (item,) = body["items"]
    newest = timeline[-1]
    assert summary(tool_api, item) == {
        "id": str(newest.id),
        "conversationId": str(world.private.id),
        "seq": 6,
        "role": "user",
        "status": "sent",
        "senderUserId": str(world.bob.id),
        "replyToId": None,
        "threadId": None,
        "content": "sample status 5",
        "createdAt": "2026-01-02T03:09:05Z",
        "sourcesErased": False,
    }


def test_list_breaks_created_at_ties_by_seq(tool_api, world):
    first = factories.post(world.private, world.alice, "sample status a", created_at=at(0))
    tied = [
        factories.post(world.private, world.bob, f"sample status tie {i}", created_at=at(5))
        for i in range(3)
    ]
    last = factories.post(world.private, world.alice, "sample status z", created_at=at(9))

    response = list_messages(tool_api, world.private)

    assert ids(response) == as_ids([last, *tied[::-1], first])


def test_list_ties_follow_seq_not_id(tool_api, world, descending_ids):
    tied = [
        factories.post(world.private, world.alice, f"sample status tie {i}", created_at=at(1))
        for i in range(4)
    ]
    assert tied[0].id > tied[-1].id

    assert ids(list_messages(tool_api, world.private)) == as_ids(tied[::-1])


def test_list_orders_by_created_at_not_by_seq(tool_api, world):
    # Imported out of order: seq follows insertion, the timeline follows created_at.
    late = factories.post(world.private, world.alice, "sample status late", created_at=at(10))
    early = factories.post(world.private, world.alice, "sample status early", created_at=at(1))
    middle = factories.post(world.private, world.bob, "sample status middle", created_at=at(5))

    assert ids(list_messages(tool_api, world.private)) == as_ids([late, middle, early])


def test_list_pages_with_limit_and_offset(tool_api, world, timeline):
    newest_first = as_ids(timeline[::-1])

    first = list_messages(tool_api, world.private, limit=2).json()
    middle = list_messages(tool_api, world.private, limit=2, offset=2).json()
    last = list_messages(tool_api, world.private, limit=2, offset=4).json()
    beyond = list_messages(tool_api, world.private, limit=2, offset=10).json()

    assert [i["id"] for i in first["items"]] == newest_first[0:2]
    assert [i["id"] for i in middle["items"]] == newest_first[2:4]
    assert [i["id"] for i in last["items"]] == newest_first[4:6]
    assert beyond["items"] == []
    assert [p["total"] for p in (first, middle, last, beyond)] == [6, 6, 6, 6]
    assert [(p["limit"], p["offset"]) for p in (first, middle, last)] == [(2, 0), (2, 2), (2, 4)]
    assert (first["hasOlder"], first["hasNewer"]) == (True, False)
    assert (middle["hasOlder"], middle["hasNewer"]) == (True, True)
    assert (last["hasOlder"], last["hasNewer"]) == (False, True)


def test_list_limit_defaults_to_50_and_accepts_200(tool_api, world):
    drafts = [
        services.MessageDraft(
            content=f"sample status {i}", sender_account_id=world.alice.id, created_at=at(i)
        )
        for i in range(205)
    ]
    messages = services.messages_create(conversation=world.private, drafts=drafts)
    newest_first = as_ids(messages[::-1])

    default = list_messages(tool_api, world.private).json()
    maximum = list_messages(tool_api, world.private, limit=200).json()

    assert [i["id"] for i in default["items"]] == newest_first[:50]
    assert (default["limit"], default["total"], default["hasOlder"]) == (50, 205, True)
    assert [i["id"] for i in maximum["items"]] == newest_first[:200]
    assert (maximum["limit"], maximum["total"], maximum["hasOlder"]) == (200, 205, True)


@pytest.mark.parametrize("limit", ["0", "-1", "201", str(10**9), "abc", "1.5", ""])
def test_list_rejects_bad_limit(tool_api, world, timeline, limit):
    assert_invalid(list_messages(tool_api, world.private, limit=limit))


@pytest.mark.parametrize("offset", ["-1", "abc", "1.5"])
def test_list_rejects_bad_offset(tool_api, world, timeline, offset):
    assert_invalid(list_messages(tool_api, world.private, offset=offset))


@pytest.mark.parametrize(
    "before_date",
    [
        "2026-01-02T03:07:05Z",
        "2026-01-02T03:07:05.000000Z",
        "2026-01-02T05:07:05+02:00",
        "2026-01-01T22:07:05-05:00",
    ],
)
def test_list_before_date_is_strictly_before(tool_api, world, timeline, before_date):
    # The bound equals m3's created_at in every spelling: m3 itself is excluded.
    response = list_messages(tool_api, world.private, beforeDate=before_date)

    assert response.status_code == 200, response.content
    body = response.json()
    assert ids(response) == as_ids(timeline[2::-1])
    assert body["total"] == 3
    assert (body["hasOlder"], body["hasNewer"]) == (False, False)


def test_list_before_date_combines_with_paging(tool_api, world, timeline):
    first = list_messages(tool_api, world.private, beforeDate="2026-01-02T03:08:00Z", limit=2)
    second = list_messages(
        tool_api, world.private, beforeDate="2026-01-02T03:08:00Z", limit=2, offset=2
    )

    assert ids(first) == as_ids([timeline[3], timeline[2]])
    assert ids(second) == as_ids([timeline[1], timeline[0]])
    assert first.json()["total"] == second.json()["total"] == 4
    assert first.json()["hasOlder"] is True
    assert second.json()["hasOlder"] is False


def test_list_before_date_earlier_than_everything_is_empty(tool_api, world, timeline):
    body = list_messages(tool_api, world.private, beforeDate="2020-01-01T00:00:00Z").json()

    assert body["items"] == []
    assert body["total"] == 0


@pytest.mark.parametrize(
    "value",
    [
        "yesterday",
        "2026-01-01",
        "2026-01-01T00:00:00",
        "2026-01-01 00:00",
        "2026-13-01T00:00:00Z",
        "2026-01-01T25:00:00Z",
        "1767225600",
        "",
        " ",
    ],
)
def test_list_rejects_invalid_before_date(tool_api, world, timeline, value):
    assert_invalid(list_messages(tool_api, world.private, beforeDate=value))


@pytest.mark.parametrize(
    "value",
    ["2026-01-02T03:07:05Z", "2026-01-02T05:07:05+02:00", "2026-01-02T03:07:04.5Z"],
)
def test_legacy_date_before_acts_as_before_date(tool_api, world, timeline, value):
    legacy = list_messages(tool_api, world.private, before=value)
    modern = list_messages(tool_api, world.private, beforeDate=value)

    assert legacy.status_code == modern.status_code == 200, legacy.content
    assert legacy.json() == modern.json()
    assert ids(legacy) == as_ids(timeline[2::-1])


def test_legacy_date_before_pages_like_before_date(tool_api, world, timeline):
    legacy = list_messages(
        tool_api, world.private, before="2026-01-02T03:08:00Z", limit=1, offset=1
    )
    modern = list_messages(
        tool_api, world.private, beforeDate="2026-01-02T03:08:00Z", limit=1, offset=1
    )

    assert legacy.status_code == 200, legacy.content
    assert legacy.json() == modern.json()
    assert ids(legacy) == [str(timeline[2].id)]


@pytest.mark.parametrize(
    "value",
    ["yesterday", "2026-01-01", "2026-01-01T00:00:00", "last-tuesday", "12345", "", " "],
)
def test_list_rejects_invalid_legacy_before(tool_api, world, timeline, value):
    assert_invalid(list_messages(tool_api, world.private, before=value))


def test_list_rejects_legacy_before_together_with_before_date(tool_api, world, timeline):
    response = list_messages(
        tool_api,
        world.private,
        before="2026-01-02T03:07:05Z",
        beforeDate="2026-01-02T03:07:05Z",
    )

    assert_invalid(response)


def test_list_hides_deleted_messages_and_total_excludes_them(tool_api, world, timeline):
    services.message_delete(message=timeline[3])
    services.message_delete(message=timeline[0])
    live_newest_first = as_ids([timeline[5], timeline[4], timeline[2], timeline[1]])

    whole = list_messages(tool_api, world.private).json()
    paged = list_messages(tool_api, world.private, limit=1).json()
    second_page = list_messages(tool_api, world.private, limit=2, offset=2).json()

    assert [i["id"] for i in whole["items"]] == live_newest_first
    assert whole["total"] == 4
    assert paged["total"] == 4
    assert [i["id"] for i in second_page["items"]] == live_newest_first[2:]
    assert second_page["hasOlder"] is False
    dated = list_messages(tool_api, world.private, beforeDate="2026-01-02T03:08:00Z").json()
    assert [i["id"] for i in dated["items"]] == as_ids([timeline[2], timeline[1]])
    assert dated["total"] == 2


def test_list_only_shows_the_requested_conversation(tool_api, world, timeline):
    factories.post(world.public, world.alice, "sample status public", created_at=at(2.5))

    assert ids(list_messages(tool_api, world.private)) == as_ids(timeline[::-1])


# --- list_messages: positional mode -----------------------------------------------------------


def test_before_anchor_lists_nearest_older_newest_first(tool_api, world, timeline):
    response = list_messages(tool_api, world.private, before=str(timeline[3].id), limit=2)

    assert response.status_code == 200, response.content
    body = response.json()
    assert ids(response) == as_ids([timeline[2], timeline[1]])
    assert body["limit"] == 2
    assert body["total"] == 6
    assert (body["hasOlder"], body["hasNewer"]) == (True, True)


def test_before_anchor_near_the_start(tool_api, world, timeline):
    near = list_messages(tool_api, world.private, before=str(timeline[1].id), limit=5).json()
    oldest = list_messages(tool_api, world.private, before=str(timeline[0].id)).json()

    assert [i["id"] for i in near["items"]] == [str(timeline[0].id)]
    assert near["hasOlder"] is False
    assert oldest["items"] == []
    assert oldest["hasOlder"] is False


def test_after_anchor_lists_nearest_newer_newest_first(tool_api, world, timeline):
    response = list_messages(tool_api, world.private, after=str(timeline[1].id), limit=2)

    assert response.status_code == 200, response.content
    body = response.json()
    # The two nearest newer messages (m2, m3), not the two newest (m4, m5).
    assert ids(response) == as_ids([timeline[3], timeline[2]])
    assert (body["hasOlder"], body["hasNewer"]) == (True, True)


def test_after_anchor_near_the_end(tool_api, world, timeline):
    near = list_messages(tool_api, world.private, after=str(timeline[4].id), limit=5).json()
    newest = list_messages(tool_api, world.private, after=str(timeline[5].id)).json()

    assert [i["id"] for i in near["items"]] == [str(timeline[5].id)]
    assert near["hasNewer"] is False
    assert newest["items"] == []
    assert newest["hasNewer"] is False


@pytest.mark.parametrize(
    ("anchor", "limit", "expected"),
    [
        (3, 4, [5, 4, 3, 2, 1]),
        (3, 2, [4, 3, 2]),
        (3, 3, [4, 3, 2]),
        (3, 1, [3]),
        (0, 4, [2, 1, 0]),
        (5, 4, [5, 4, 3]),
        (2, 200, [5, 4, 3, 2, 1, 0]),
    ],
)
def test_around_anchor_is_anchor_plus_half_limit_each_side(
    tool_api, world, timeline, anchor, limit, expected
):
    response = list_messages(tool_api, world.private, around=str(timeline[anchor].id), limit=limit)

    assert response.status_code == 200, response.content
    assert ids(response) == as_ids([timeline[i] for i in expected])


def test_around_reports_more_on_each_side(tool_api, world, timeline):
    body = list_messages(tool_api, world.private, around=str(timeline[3].id), limit=2).json()

    assert (body["hasOlder"], body["hasNewer"]) == (True, True)
    edge = list_messages(tool_api, world.private, around=str(timeline[3].id), limit=4).json()
    assert (edge["hasOlder"], edge["hasNewer"]) == (True, False)


def test_positional_reads_break_created_at_ties_by_seq(tool_api, world):
    tied = [
        factories.post(world.private, world.alice, f"sample status tie {i}", created_at=at(1))
        for i in range(5)
    ]

    before = list_messages(tool_api, world.private, before=str(tied[2].id), limit=10)
    after = list_messages(tool_api, world.private, after=str(tied[2].id), limit=10)
    around = list_messages(tool_api, world.private, around=str(tied[2].id), limit=2)

    assert ids(before) == as_ids([tied[1], tied[0]])
    assert ids(after) == as_ids([tied[4], tied[3]])
    assert ids(around) == as_ids([tied[3], tied[2], tied[1]])


def test_positional_reads_skip_deleted_messages(tool_api, world, timeline):
    services.message_delete(message=timeline[2])
    services.message_delete(message=timeline[4])

    before = list_messages(tool_api, world.private, before=str(timeline[3].id), limit=2).json()
    after = list_messages(tool_api, world.private, after=str(timeline[3].id), limit=2).json()
    around = list_messages(tool_api, world.private, around=str(timeline[3].id), limit=2).json()

    assert [i["id"] for i in before["items"]] == as_ids([timeline[1], timeline[0]])
    assert [i["id"] for i in after["items"]] == [str(timeline[5].id)]
    assert [i["id"] for i in around["items"]] == as_ids([timeline[5], timeline[3], timeline[1]])
    assert before["total"] == after["total"] == around["total"] == 4


def test_positional_anchor_accepts_uppercase_uuid(tool_api, world, timeline):
    response = list_messages(tool_api, world.private, before=str(timeline[2].id).upper())

    assert ids(response) == as_ids([timeline[1], timeline[0]])


@pytest.mark.parametrize(
    "keys",
    [("before", "after"), ("before", "around"), ("after", "around"), ("before", "after", "around")],
)
def test_more_than_one_positional_anchor_is_invalid(tool_api, world, timeline, keys):
    params = {key: str(timeline[2].id) for key in keys}

    assert_invalid(list_messages(tool_api, world.private, **params))


def test_legacy_date_before_with_after_anchor_is_invalid(tool_api, world, timeline):
    response = list_messages(
        tool_api, world.private, before="2026-01-02T03:07:05Z", after=str(timeline[1].id)
    )

    assert_invalid(response)


@pytest.mark.parametrize("direction", ["before", "after", "around"])
@pytest.mark.parametrize(
    "extra",
    [{"offset": "0"}, {"offset": "2"}, {"beforeDate": "2026-01-02T03:07:05Z"}],
)
def test_positional_with_offset_or_before_date_is_invalid(
    tool_api, world, timeline, direction, extra
):
    response = list_messages(tool_api, world.private, **{direction: str(timeline[3].id)}, **extra)

    assert_invalid(response)


@pytest.mark.parametrize("direction", ["after", "around"])
def test_positional_anchor_must_be_a_uuid(tool_api, world, timeline, direction):
    assert_invalid(list_messages(tool_api, world.private, **{direction: "not-a-message-id"}))
    assert_invalid(list_messages(tool_api, world.private, **{direction: "2026-01-02T03:07:05Z"}))


@pytest.mark.parametrize("direction", ["before", "after", "around"])
def test_unseen_anchors_are_not_found_identically(tool_api, world, timeline, direction):
    deleted = timeline[2]
    services.message_delete(message=deleted)
    other_room = factories.post(world.public, world.alice, "sample status public", created_at=at(2))
    _, hidden = never_joined_room(world.workspace, world.alice)
    _, left = left_room(world.workspace, world.agent, world.alice)
    _, _, _, foreign = other_workspace()
    anchors = [deleted.id, other_room.id, hidden.id, left.id, foreign.id, uuid.uuid4()]

    responses = [
        list_messages(tool_api, world.private, **{direction: str(anchor)}) for anchor in anchors
    ]

    for response in responses:
        assert_not_found(response)
    assert len({response.content for response in responses}) == 1


def test_unseen_anchor_body_matches_unknown_conversation(tool_api, world, timeline):
    missing_anchor = list_messages(tool_api, world.private, before=str(uuid.uuid4()))
    missing_room = tool_api.get(LIST_URL, {"conversationId": str(uuid.uuid4())})

    assert_not_found(missing_anchor)
    assert missing_anchor.content == missing_room.content


# --- list_messages: conversation access -------------------------------------------------------


@pytest.mark.parametrize(
    "extra",
    [{}, {"limit": "5", "offset": "1"}, {"beforeDate": "2026-01-02T03:07:05Z"}],
)
def test_list_non_member_conversations_match_a_random_id_byte_for_byte(tool_api, world, extra):
    never, _ = never_joined_room(world.workspace, world.alice)
    left, _ = left_room(world.workspace, world.agent, world.alice)
    _, _, foreign, _ = other_workspace()
    rooms = [never.id, left.id, foreign.id]

    random_response = tool_api.get(LIST_URL, {"conversationId": str(uuid.uuid4()), **extra})
    responses = [tool_api.get(LIST_URL, {"conversationId": str(r), **extra}) for r in rooms]

    assert_not_found(random_response)
    for response in responses:
        assert response.status_code == 404
        assert response.content == random_response.content


def test_list_positional_in_non_member_conversation_is_not_found(tool_api, world):
    left, message = left_room(world.workspace, world.agent, world.alice)

    response = list_messages(tool_api, left, around=str(message.id))
    random_response = tool_api.get(
        LIST_URL, {"conversationId": str(uuid.uuid4()), "around": str(message.id)}
    )

    assert_not_found(response)
    assert response.content == random_response.content


def test_list_after_leaving_hides_even_previously_seen_messages(tool_api, world, timeline):
    assert list_messages(tool_api, world.private).status_code == 200

    services.membership_leave(conversation=world.private, agent_id=world.agent.id)

    assert_not_found(list_messages(tool_api, world.private))


def test_rejoining_agent_reads_the_conversation_again(tool_api, world):
    room, message = left_room(world.workspace, world.agent, world.alice)
    factories.join(room, world.agent, joined_at=at(45))

    assert ids(list_messages(tool_api, room)) == [str(message.id)]


def test_list_never_shows_other_workspaces(world, timeline):
    _, foreign_agent, foreign_room, foreign_message = other_workspace()
    # The other tenant's agent joins nothing here, and our agent is in nothing there.
    foreign_api = factories.agent_client(foreign_agent)

    ours = list_messages(world.agent_api, world.private).json()
    theirs_on_ours = list_messages(foreign_api, world.private)
    ours_on_theirs = list_messages(world.agent_api, foreign_room)

    assert str(foreign_message.id) not in [i["id"] for i in ours["items"]]
    assert ours["total"] == 6
    assert_not_found(theirs_on_ours)
    assert_not_found(ours_on_theirs)
    assert ids(list_messages(foreign_api, foreign_room)) == [str(foreign_message.id)]


def test_list_rejects_a_repeated_conversation_id(tool_api, world, timeline):
    response = tool_api.get(
        f"{LIST_URL}?conversationId={world.public.id}&conversationId={world.private.id}"
    )

    assert_invalid(response)


@pytest.mark.parametrize(
    "params",
    [
        {"limit": "1\x00"},
        {"beforeDate": "2026-01-02T03:07:05Z\x00"},
        {"before": "\x00"},
        {"after": "\x00"},
    ],
)
def test_list_rejects_nul_bytes_without_a_server_error(tool_api, world, timeline, params):
    assert_invalid(list_messages(tool_api, world.private, **params))


@pytest.mark.parametrize(
    "params",
    [
        {"conversation_id": "X"},
        {"conversationID": "X"},
        {"page": "2"},
        {"q": "sample"},
        {"beforedate": "2026-01-02T03:07:05Z"},
    ],
)
def test_list_rejects_unknown_parameters(tool_api, world, timeline, params):
    params = {k: str(world.private.id) if v == "X" else v for k, v in params.items()}
    response = tool_api.get(LIST_URL, {"conversationId": str(world.private.id), **params})

    assert_invalid(response)


def test_list_conversation_id_misspelt_alone_is_invalid_not_a_workspace_listing(tool_api, world):
    response = tool_api.get(LIST_URL, {"conversation_id": str(world.private.id)})

    assert_invalid(response)


@pytest.mark.parametrize("value", ["", "abc", "12345", str(uuid.uuid4())[:-1]])
def test_list_requires_a_valid_conversation_id(tool_api, world, value):
    assert_invalid(tool_api.get(LIST_URL, {"conversationId": value}))


def test_list_requires_conversation_id(tool_api, world):
    assert_invalid(tool_api.get(LIST_URL))


# --- get_message --------------------------------------------------------------------------------


def test_get_message_returns_exactly_the_summary_fields(tool_api, world):
    message = factories.post(world.private, world.alice, "sample status", created_at=at(0))

    response = tool_api.get(message_url(message.id))

    assert response.status_code == 200, response.content
    assert summary(tool_api, response.json()) == {
        "id": str(message.id),
        "conversationId": str(world.private.id),
        "seq": 1,
        "role": "user",
        "status": "sent",
        "senderUserId": str(world.alice.id),
        "replyToId": None,
        "threadId": None,
        "content": "sample status",
        "createdAt": "2026-01-02T03:04:05Z",
        "sourcesErased": False,
    }


def test_get_message_agent_sender_reply_and_thread(tool_api, world):
    root = factories.post(world.private, world.alice, "sample status root", created_at=at(0))
    reply = factories.post(
        world.private,
        world.agent,
        "sample status reply",
        created_at=at(1),
        reply_to_id=root.id,
        thread_id=root.id,
        status="pending",
    )

    body = summary(tool_api, tool_api.get(message_url(reply.id)).json())

    assert set(body) == SUMMARY_KEYS | {"senderAgentId"}
    assert "senderUserId" not in body
    assert body["senderAgentId"] == str(world.agent.id)
    assert body["role"] == "assistant"
    assert body["status"] == "pending"
    assert body["seq"] == 2
    assert body["replyToId"] == str(root.id)
    assert body["threadId"] == str(root.id)
    assert body["createdAt"] == "2026-01-02T03:05:05Z"


def test_get_message_user_sender_has_only_sender_user_id(tool_api, world):
    message = factories.post(world.public, world.bob, "sample status", created_at=at(0))

    body = summary(tool_api, tool_api.get(message_url(message.id)).json())

    assert set(body) == SUMMARY_KEYS | {"senderUserId"}
    assert body["senderUserId"] == str(world.bob.id)


def test_get_message_in_any_current_conversation(tool_api, world):
    messages = [
        factories.post(room, world.alice, "sample status", created_at=at(i))
        for i, room in enumerate((world.public, world.private, world.direct))
    ]

    for message in messages:
        response = tool_api.get(message_url(message.id))
        assert response.status_code == 200, response.content
        assert response.json()["id"] == str(message.id)


def test_get_message_unavailable_is_identical_to_missing(tool_api, world):
    _, never_seen = never_joined_room(world.workspace, world.alice)
    _, left_behind = left_room(world.workspace, world.agent, world.alice)
    _, _, _, foreign = other_workspace()
    deleted = factories.post(world.private, world.alice, "sample status gone", created_at=at(3))
    services.message_delete(message=deleted)

    missing = tool_api.get(message_url(uuid.uuid4()))
    others = [tool_api.get(message_url(m.id)) for m in (never_seen, left_behind, foreign, deleted)]

    assert_not_found(missing)
    for response in others:
        assert response.status_code == 404
        assert response.content == missing.content
    assert dict(missing.headers).keys() == dict(others[0].headers).keys()


def test_get_message_after_agent_leaves_is_not_found(tool_api, world):
    message = factories.post(world.private, world.alice, "sample status", created_at=at(0))
    assert tool_api.get(message_url(message.id)).status_code == 200

    services.membership_leave(conversation=world.private, agent_id=world.agent.id)

    response = tool_api.get(message_url(message.id))
    assert response.status_code == 404
    assert response.content == tool_api.get(message_url(uuid.uuid4())).content


def test_get_message_rejects_unknown_query_parameters(tool_api, world):
    message = factories.post(world.private, world.alice, "sample status", created_at=at(0))

    response = tool_api.get(message_url(message.id), {"conversationId": str(world.private.id)})

    # SPEC §5: unknown fields are invalid_arguments, as on the other two tools.
    assert_invalid(response)


def test_get_message_with_malformed_id_is_not_found(tool_api, world):
    response = tool_api.get("/api/v1/messages/not-a-uuid")

    assert_not_found(response)


# --- search_messages --------------------------------------------------------------------------


def post_all(room, sender, contents: list[str], start: int = 0) -> list[Message]:
    return [
        factories.post(room, sender, content, created_at=at(start + i))
        for i, content in enumerate(contents)
    ]


def test_search_is_case_insensitive_literal_substring(tool_api, world):
    lower, upper, mixed, _apart, _other = post_all(
        world.private,
        world.alice,
        ["sample status", "SAMPLE STATUS", "a Status Report", "stat us", "something else"],
    )

    response = search(tool_api, query="sTaTuS")

    assert response.status_code == 200, response.content
    body = response.json()
    assert set(body) >= {"items", "total"}
    assert ids(response) == as_ids([mixed, upper, lower])
    assert body["total"] == 3


@pytest.mark.parametrize(
    ("query", "matching", "not_matching"),
    [
        ("50%", ["50% done"], ["500 done", "50 done", "5% done"]),
        ("%", ["50% done"], ["500 done", "plain"]),
        ("a_b", ["a_b test"], ["axb test", "ab test"]),
        ("_", ["a_b test"], ["axb test"]),
        ("\\", ["path C:\\temp\\file"], ["path C:/temp/file", "plain"]),
        ("C:\\temp", ["path C:\\temp\\file"], ["path C:temp", "path C:/temp"]),
        ("\\%", ["literal \\% sign"], ["literal % sign", "literal \\x sign"]),
        ("%_\\", ["odd %_\\ run"], ["odd %x\\ run", "odd a_\\ run"]),
        ("'; DROP", ["it's '; DROP here"], ["drop it"]),
    ],
)
def test_search_wildcards_and_backslash_match_themselves(
    tool_api, world, query, matching, not_matching
):
    expected = post_all(world.private, world.alice, matching)
    post_all(world.private, world.alice, not_matching, start=len(matching))

    response = search(tool_api, query=query)

    assert response.status_code == 200, response.content
    assert ids(response) == as_ids(expected[::-1])


@pytest.mark.parametrize(
    ("query", "matching", "not_matching"),
    [
        ("CAFÉ", ["café au lait", "Café noir"], ["cafe plain", "CAFE plain"]),
        ("café", ["CAFÉ AU LAIT"], ["CAFE plain"]),
        ("é", ["ÉCOLE"], ["ecole", "E"]),
        ("É", ["résumé"], ["resume"]),
        ("ПРИВЕТ", ["привет мир"], ["hello"]),
        ("ñ", ["SEÑOR"], ["senor"]),
    ],
)
def test_search_folds_non_ascii_case(tool_api, world, query, matching, not_matching):
    expected = post_all(world.private, world.alice, matching)
    post_all(world.private, world.alice, not_matching, start=len(matching))

    response = search(tool_api, query=query)

    assert response.status_code == 200, response.content
    assert ids(response) == as_ids(expected[::-1])


def test_search_is_newest_first_across_conversations(tool_api, world):
    public = factories.post(world.public, world.alice, "sample status p", created_at=at(1))
    direct = factories.post(world.direct, world.alice, "sample status d", created_at=at(2))
    private = factories.post(world.private, world.bob, "sample status q", created_at=at(3))
    older = factories.post(world.private, world.agent, "sample status o", created_at=at(0))

    response = search(tool_api, query="sample status")

    assert ids(response) == as_ids([private, direct, public, older])
    assert response.json()["total"] == 4


def test_search_ties_within_a_conversation_follow_seq(tool_api, world, descending_ids):
    # Same created_at: the later message in the conversation (higher seq) is the newer one,
    # exactly as list_messages orders it; a random id must not decide.
    tied = [
        factories.post(world.private, world.alice, f"sample status tie {i}", created_at=at(1))
        for i in range(4)
    ]
    assert tied[0].id > tied[-1].id

    response = search(tool_api, query="sample status")
    listed = list_messages(tool_api, world.private)

    assert ids(response) == as_ids(tied[::-1])
    assert ids(response) == ids(listed)


def test_search_narrows_to_one_conversation(tool_api, world):
    factories.post(world.public, world.alice, "sample status p", created_at=at(1))
    inside = [
        factories.post(world.private, world.alice, "sample status a", created_at=at(2)),
        factories.post(world.private, world.bob, "sample status b", created_at=at(3)),
    ]
    factories.post(world.private, world.bob, "unrelated", created_at=at(4))

    response = search(tool_api, query="status", conversationId=str(world.private.id))

    assert response.status_code == 200, response.content
    assert ids(response) == as_ids(inside[::-1])
    assert response.json()["total"] == 2


def test_search_narrowed_to_unavailable_conversation_is_not_found(tool_api, world):
    never, _ = never_joined_room(world.workspace, world.alice)
    left, _ = left_room(world.workspace, world.agent, world.alice)
    _, _, foreign, _ = other_workspace()

    random_response = search(tool_api, query="sample", conversationId=str(uuid.uuid4()))
    responses = [
        search(tool_api, query="sample", conversationId=str(room.id))
        for room in (never, left, foreign)
    ]

    assert_not_found(random_response)
    for response in responses:
        assert response.status_code == 404
        assert response.content == random_response.content


def test_search_limit_defaults_to_20_and_total_counts_returned_items(tool_api, world):
    drafts = [
        services.MessageDraft(
            content=f"sample status {i}", sender_account_id=world.alice.id, created_at=at(i)
        )
        for i in range(25)
    ]
    messages = services.messages_create(conversation=world.public, drafts=drafts)
    newest_first = as_ids(messages[::-1])

    default = search(tool_api, query="sample status").json()
    small = search(tool_api, query="sample status", limit=5).json()
    large = search(tool_api, query="sample status", limit=100).json()

    assert [i["id"] for i in default["items"]] == newest_first[:20]
    assert default["total"] == 20
    assert [i["id"] for i in small["items"]] == newest_first[:5]
    assert small["total"] == 5
    assert [i["id"] for i in large["items"]] == newest_first
    assert large["total"] == 25


def test_search_with_no_match_is_empty(tool_api, world):
    factories.post(world.public, world.alice, "sample status", created_at=at(1))

    body = search(tool_api, query="nothing like this").json()

    assert body["items"] == []
    assert body["total"] == 0


@pytest.mark.parametrize("limit", ["0", "-1", "101", str(10**9), "abc", "1.5", ""])
def test_search_rejects_bad_limit(tool_api, world, limit):
    assert_invalid(search(tool_api, query="sample", limit=limit))


@pytest.mark.parametrize("query", ["", " ", "   ", "\t\n", "\u3000"])
def test_search_rejects_empty_or_blank_query(tool_api, world, query):
    factories.post(world.public, world.alice, "sample status", created_at=at(1))

    assert_invalid(search(tool_api, query=query))


@pytest.mark.parametrize("query", ["sample\x00status", "\x00"])
def test_search_rejects_nul_bytes_without_a_server_error(tool_api, world, query):
    assert_invalid(search(tool_api, query=query))


def test_search_requires_query(tool_api, world):
    assert_invalid(search(tool_api))
    assert_invalid(search(tool_api, conversationId=str(world.public.id)))


def test_search_rejects_a_100_kb_query(tool_api, world):
    factories.post(world.public, world.alice, "sample status", created_at=at(1))

    response = search(tool_api, query="a" * 100_000)

    assert_invalid(response)
    assert b"aaaaaaaaaa" not in response.content


@pytest.mark.parametrize(
    "params",
    [
        {"query": "sample", "conversation_id": "X"},
        {"query": "sample", "q": "status"},
        {"q": "sample"},
        {"query": "sample", "offset": "0"},
        {"query": "sample", "beforeDate": "2026-01-02T03:07:05Z"},
    ],
)
def test_search_rejects_unknown_parameters(tool_api, world, params):
    params = {k: str(world.private.id) if v == "X" else v for k, v in params.items()}

    assert_invalid(search(tool_api, **params))


@pytest.mark.parametrize("value", ["", "abc", "12345"])
def test_search_rejects_malformed_conversation_id(tool_api, world, value):
    assert_invalid(search(tool_api, query="sample", conversationId=value))


def test_search_never_returns_deleted_messages(tool_api, world):
    kept = factories.post(world.private, world.alice, "sample status kept", created_at=at(1))
    gone = factories.post(world.private, world.alice, "sample status gone", created_at=at(2))
    services.message_delete(message=gone)

    everywhere = search(tool_api, query="sample status")
    narrowed = search(tool_api, query="sample status", conversationId=str(world.private.id))

    assert ids(everywhere) == [str(kept.id)]
    assert ids(narrowed) == [str(kept.id)]
    assert everywhere.json()["total"] == 1


def test_search_never_returns_left_or_unjoined_conversations(tool_api, world):
    visible = factories.post(world.public, world.alice, "sample status here", created_at=at(0))
    never_joined_room(world.workspace, world.alice)
    left_room(world.workspace, world.agent, world.alice)

    response = search(tool_api, query="sample status")

    assert ids(response) == [str(visible.id)]


def test_search_stops_returning_a_conversation_once_the_agent_leaves(tool_api, world):
    message = factories.post(world.private, world.alice, "sample status", created_at=at(0))
    assert ids(search(tool_api, query="sample status")) == [str(message.id)]

    services.membership_leave(conversation=world.private, agent_id=world.agent.id)

    assert ids(search(tool_api, query="sample status")) == []


def test_search_never_returns_other_workspaces(world):
    ours = factories.post(world.public, world.alice, "sample status ours", created_at=at(1))
    _, foreign_agent, _, foreign = other_workspace()

    our_hits = search(world.agent_api, query="sample status")
    their_hits = search(factories.agent_client(foreign_agent), query="sample status")

    assert ids(our_hits) == [str(ours.id)]
    assert ids(their_hits) == [str(foreign.id)]


# --- authentication and authorisation ---------------------------------------------------------


def tool_requests(world):
    message = factories.post(world.private, world.alice, "sample status", created_at=at(0))
    return [
        (LIST_URL, {"conversationId": str(world.private.id)}),
        (message_url(message.id), {}),
        (SEARCH_URL, {"query": "sample"}),
    ]


def test_service_token_is_forbidden_on_agent_tools(world):
    for url, params in tool_requests(world):
        response = world.service.get(url, params)
        assert_error(response, 403, "forbidden")
        assert b"sample status" not in response.content


def test_missing_token_is_unauthenticated_on_agent_tools(world):
    anonymous = APIClient()
    for url, params in tool_requests(world):
        response = anonymous.get(url, params)
        assert_error(response, 401, "unauthenticated")


@pytest.mark.parametrize(
    "header",
    ["Bearer not-a-real-token", "Bearer ", "Basic dXNlcjpwYXNz", "Token abc"],
)
def test_bad_token_is_unauthenticated_on_agent_tools(world, header):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=header)
    for url, params in tool_requests(world):
        assert_error(client.get(url, params), 401, "unauthenticated")


def test_revoked_agent_token_is_unauthenticated(world):
    token, raw = services.token_create(
        workspace_id=world.workspace.id, kind="agent", agent=world.agent
    )
    client = factories.bearer_client(raw)
    assert client.get(SEARCH_URL, {"query": "sample"}).status_code == 200

    services.token_revoke(token=token)

    assert_error(client.get(SEARCH_URL, {"query": "sample"}), 401, "unauthenticated")


def test_run_token_acts_as_the_runs_agent(world):
    second_agent = factories.make_agent(world.workspace, "Second agent")
    room = factories.make_conversation(world.workspace, "private", "second-only")
    factories.join(room, second_agent, joined_at=at(-60))
    factories.join(room, world.alice, joined_at=at(-60))
    theirs = factories.post(room, world.alice, "sample status second", created_at=at(1))
    ours = factories.post(world.private, world.alice, "sample status first", created_at=at(2))
    _, token = run_create(
        workspace_id=world.workspace.id,
        agent_id=world.agent.id,
        conversation_id=world.private.id,
        requester_id=world.alice.id,
    )
    run_api = factories.bearer_client(token)

    assert ids(search(run_api, query="sample status")) == [str(ours.id)]
    assert_not_found(run_api.get(message_url(theirs.id)))
    assert_not_found(list_messages(run_api, room))
