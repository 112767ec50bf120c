"""The agent-tool selectors, called directly: the same rules the HTTP tests check, without HTTP.

Every selector starts from ``agent_visible_messages`` (live messages, the caller's workspace,
conversations where the agent is a current member) and only narrows it; anything else is the
same ``NotFound`` as a missing row.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.db import connection, transaction

from formation.errors import NotFound
from messages_app import selectors, services
from messages_app.models import Message
from tests import factories
from tests.factories import at, left_room, never_joined_room, other_workspace

pytestmark = pytest.mark.django_db


def as_ids(messages: list[Message]) -> list[uuid.UUID]:
    return [message.id for message in messages]


def scope(world) -> dict[str, uuid.UUID]:
    return {"workspace_id": world.workspace.id, "agent_id": world.agent.id}


def page_ids(page: selectors.MessagePage) -> list[uuid.UUID]:
    return as_ids(page.items)


def list_page(world, conversation=None, **kwargs) -> selectors.MessagePage:
    kwargs.setdefault("limit", 50)
    return selectors.message_list(
        **scope(world), conversation_id=(conversation or world.private).id, **kwargs
    )


def around_page(world, anchor: Message, direction: str, limit: int, conversation=None):
    return selectors.message_list_around(
        **scope(world),
        conversation_id=(conversation or world.private).id,
        anchor_id=anchor.id,
        direction=direction,
        limit=limit,
    )


def search(world, query: str, limit: int = 20, conversation=None) -> list[Message]:
    return selectors.message_search(
        **scope(world),
        query=query,
        limit=limit,
        conversation_id=conversation.id if conversation is not None else None,
    )


# --- agent_visible_messages ---------------------------------------------------------------------


def test_visible_messages_are_live_current_and_in_workspace(world, timeline):
    public = factories.post(world.public, world.alice, "sample status public", created_at=at(9))
    services.message_delete(message=timeline[0])
    never_joined_room(world.workspace, world.alice)
    left_room(world.workspace, world.agent, world.alice)
    other_workspace()

    visible = selectors.agent_visible_messages(**scope(world))

    assert set(visible.values_list("id", flat=True)) == {*as_ids(timeline[1:]), public.id}


def test_visible_messages_for_an_agent_of_another_workspace_is_empty(world, timeline):
    _, foreign_agent, _, _ = other_workspace()

    mixed = selectors.agent_visible_messages(
        workspace_id=world.workspace.id, agent_id=foreign_agent.id
    )
    crossed = selectors.agent_visible_messages(
        workspace_id=foreign_agent.workspace_id, agent_id=world.agent.id
    )

    assert list(mixed) == []
    assert list(crossed) == []


# --- message_list ---------------------------------------------------------------------------


def test_list_is_newest_first(world, timeline):
    page = list_page(world)

    assert page_ids(page) == as_ids(timeline[::-1])
    assert (page.total, page.limit, page.offset) == (6, 50, 0)
    assert (page.has_older, page.has_newer) == (False, False)


def test_list_orders_by_created_at_then_seq(world, descending_ids):
    late = factories.post(world.private, world.alice, "sample status late", created_at=at(10))
    tied = [
        factories.post(world.private, world.bob, f"sample status tie {i}", created_at=at(5))
        for i in range(3)
    ]
    early = factories.post(world.private, world.alice, "sample status early", created_at=at(1))

    assert page_ids(list_page(world)) == as_ids([late, *tied[::-1], early])


def test_list_pages_by_limit_and_offset(world, timeline):
    newest_first = as_ids(timeline[::-1])

    pages = [list_page(world, limit=2, offset=offset) for offset in (0, 2, 4, 6)]

    assert [page_ids(p) for p in pages] == [
        newest_first[0:2],
        newest_first[2:4],
        newest_first[4:6],
        [],
    ]
    assert [p.total for p in pages] == [6, 6, 6, 6]
    assert [(p.has_older, p.has_newer) for p in pages] == [
        (True, False),
        (True, True),
        (False, True),
        (False, True),
    ]


def test_list_before_date_is_strictly_before(world, timeline):
    exact = list_page(world, before_date=timeline[3].created_at)
    just_after = list_page(world, before_date=timeline[3].created_at + timedelta(microseconds=1))
    too_early = list_page(world, before_date=at(-1))

    assert page_ids(exact) == as_ids(timeline[2::-1])
    assert exact.total == 3
    assert page_ids(just_after) == as_ids(timeline[3::-1])
    assert page_ids(too_early) == []
    assert too_early.total == 0


def test_list_before_date_pages(world, timeline):
    first = list_page(world, before_date=at(3.5), limit=2)
    second = list_page(world, before_date=at(3.5), limit=2, offset=2)

    assert page_ids(first) == as_ids([timeline[3], timeline[2]])
    assert page_ids(second) == as_ids([timeline[1], timeline[0]])
    assert first.total == second.total == 4
    assert (first.has_older, second.has_older) == (True, False)


def test_list_excludes_deleted_from_items_and_total(world, timeline):
    services.message_delete(message=timeline[4])
    services.message_delete(message=timeline[1])

    whole = list_page(world)
    paged = list_page(world, limit=1)

    assert page_ids(whole) == as_ids([timeline[5], timeline[3], timeline[2], timeline[0]])
    assert whole.total == 4
    assert paged.total == 4
    assert paged.has_older is True


def test_list_only_reads_the_named_conversation(world, timeline):
    factories.post(world.public, world.alice, "sample status public", created_at=at(2.5))

    assert page_ids(list_page(world)) == as_ids(timeline[::-1])


def test_list_unavailable_conversations_are_not_found(world):
    never, _ = never_joined_room(world.workspace, world.alice)
    left, _ = left_room(world.workspace, world.agent, world.alice)
    _, _, foreign, _ = other_workspace()

    for conversation_id in (never.id, left.id, foreign.id, uuid.uuid4()):
        with pytest.raises(NotFound) as raised:
            selectors.message_list(**scope(world), conversation_id=conversation_id, limit=50)
        assert (raised.value.message, raised.value.details) == (NotFound.default_message, {})


def test_list_with_the_wrong_workspace_is_not_found(world, timeline):
    other, _, _, _ = other_workspace()

    with pytest.raises(NotFound):
        selectors.message_list(
            workspace_id=other.id,
            agent_id=world.agent.id,
            conversation_id=world.private.id,
            limit=50,
        )


def test_list_after_leaving_and_rejoining(world):
    room, message = left_room(world.workspace, world.agent, world.alice)
    with pytest.raises(NotFound):
        list_page(world, room)

    factories.join(room, world.agent, joined_at=at(45))

    assert page_ids(list_page(world, room)) == [message.id]


# --- message_list_around --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("direction", "anchor", "limit", "expected"),
    [
        ("before", 3, 2, [2, 1]),
        ("before", 3, 10, [2, 1, 0]),
        ("before", 0, 10, []),
        ("after", 1, 2, [3, 2]),
        ("after", 1, 10, [5, 4, 3, 2]),
        ("after", 5, 10, []),
        ("around", 3, 4, [5, 4, 3, 2, 1]),
        ("around", 3, 2, [4, 3, 2]),
        ("around", 3, 3, [4, 3, 2]),
        ("around", 3, 1, [3]),
        ("around", 0, 4, [2, 1, 0]),
        ("around", 5, 4, [5, 4, 3]),
    ],
)
def test_positional_reads_nearest_messages_newest_first(
    world, timeline, direction, anchor, limit, expected
):
    page = around_page(world, timeline[anchor], direction, limit)

    assert page_ids(page) == as_ids([timeline[i] for i in expected])
    assert page.limit == limit
    assert page.total == 6


@pytest.mark.parametrize(
    ("direction", "anchor", "limit", "older", "newer"),
    [
        ("before", 3, 2, True, True),
        ("before", 2, 2, False, True),
        ("after", 1, 2, True, True),
        ("after", 3, 2, True, False),
        ("around", 3, 2, True, True),
        ("around", 3, 4, True, False),
        ("around", 2, 4, False, True),
    ],
)
def test_positional_reports_more_on_each_side(
    world, timeline, direction, anchor, limit, older, newer
):
    page = around_page(world, timeline[anchor], direction, limit)

    assert (page.has_older, page.has_newer) == (older, newer)


def test_positional_ties_follow_seq_not_id(world, descending_ids):
    tied = [
        factories.post(world.private, world.alice, f"sample status tie {i}", created_at=at(1))
        for i in range(5)
    ]

    assert page_ids(around_page(world, tied[2], "before", 10)) == as_ids([tied[1], tied[0]])
    assert page_ids(around_page(world, tied[2], "after", 10)) == as_ids([tied[4], tied[3]])
    assert page_ids(around_page(world, tied[2], "around", 2)) == as_ids([tied[3], tied[2], tied[1]])


def test_positional_skips_deleted_neighbours(world, timeline):
    services.message_delete(message=timeline[2])
    services.message_delete(message=timeline[4])

    before = around_page(world, timeline[3], "before", 2)
    after = around_page(world, timeline[3], "after", 2)
    around = around_page(world, timeline[3], "around", 2)

    assert page_ids(before) == as_ids([timeline[1], timeline[0]])
    assert page_ids(after) == [timeline[5].id]
    assert page_ids(around) == as_ids([timeline[5], timeline[3], timeline[1]])
    assert before.total == after.total == around.total == 4


@pytest.mark.parametrize("direction", ["before", "after", "around"])
def test_positional_unseen_anchor_is_not_found(world, timeline, direction):
    deleted = timeline[2]
    services.message_delete(message=deleted)
    elsewhere = factories.post(world.public, world.alice, "sample status p", created_at=at(2))
    _, hidden = never_joined_room(world.workspace, world.alice)
    _, left = left_room(world.workspace, world.agent, world.alice)
    _, _, _, foreign = other_workspace()

    for anchor_id in (deleted.id, elsewhere.id, hidden.id, left.id, foreign.id, uuid.uuid4()):
        with pytest.raises(NotFound):
            selectors.message_list_around(
                **scope(world),
                conversation_id=world.private.id,
                anchor_id=anchor_id,
                direction=direction,
                limit=10,
            )


def test_positional_in_unavailable_conversation_is_not_found(world):
    room, message = left_room(world.workspace, world.agent, world.alice)

    with pytest.raises(NotFound):
        around_page(world, message, "around", 10, conversation=room)


# --- message_get ----------------------------------------------------------------------------


def test_get_returns_a_visible_message(world):
    messages = [
        factories.post(room, world.alice, "sample status", created_at=at(i))
        for i, room in enumerate((world.public, world.private, world.direct))
    ]

    for message in messages:
        assert selectors.message_get(**scope(world), message_id=message.id) == message


def test_get_unavailable_messages_are_not_found(world):
    _, never_seen = never_joined_room(world.workspace, world.alice)
    _, left_behind = left_room(world.workspace, world.agent, world.alice)
    _, _, _, foreign = other_workspace()
    deleted = factories.post(world.private, world.alice, "sample status gone", created_at=at(3))
    services.message_delete(message=deleted)

    for message_id in (never_seen.id, left_behind.id, foreign.id, deleted.id, uuid.uuid4()):
        with pytest.raises(NotFound) as raised:
            selectors.message_get(**scope(world), message_id=message_id)
        assert (raised.value.message, raised.value.details) == (NotFound.default_message, {})


def test_get_with_the_wrong_workspace_is_not_found(world):
    message = factories.post(world.private, world.alice, "sample status", created_at=at(0))
    other, _, _, _ = other_workspace()

    with pytest.raises(NotFound):
        selectors.message_get(workspace_id=other.id, agent_id=world.agent.id, message_id=message.id)


# --- message_search -------------------------------------------------------------------------


def post_all(room, sender, contents: list[str], start: int = 0) -> list[Message]:
    return [
        factories.post(room, sender, content, created_at=at(start + i))
        for i, content in enumerate(contents)
    ]


@pytest.mark.parametrize(
    ("query", "matching", "not_matching"),
    [
        ("sTaTuS", ["sample status", "SAMPLE STATUS", "a Status Report"], ["stat us", "other"]),
        ("50%", ["50% done"], ["500 done", "50 done", "5% done"]),
        ("%", ["50% done"], ["500 done", "plain"]),
        ("a_b", ["a_b test"], ["axb test", "ab test"]),
        ("_", ["a_b test"], ["axb test"]),
        ("\\", ["path C:\\temp\\file"], ["path C:/temp/file", "plain"]),
        ("C:\\temp", ["path C:\\temp\\file"], ["path C:temp", "path C:/temp"]),
        ("\\%", ["literal \\% sign"], ["literal % sign", "literal \\x sign"]),
        ("CAFÉ", ["café au lait", "Café noir"], ["cafe plain", "CAFE plain"]),
        ("é", ["ÉCOLE"], ["ecole"]),
        ("É", ["résumé"], ["resume"]),
        ("ПРИВЕТ", ["привет мир"], ["hello"]),
    ],
)
def test_search_is_case_insensitive_literal_substring(world, query, matching, not_matching):
    expected = post_all(world.private, world.alice, matching)
    post_all(world.private, world.alice, not_matching, start=len(matching))

    assert as_ids(search(world, query)) == as_ids(expected[::-1])


def test_search_is_newest_first_across_conversations(world):
    public = factories.post(world.public, world.alice, "sample status p", created_at=at(1))
    direct = factories.post(world.direct, world.alice, "sample status d", created_at=at(2))
    private = factories.post(world.private, world.bob, "sample status q", created_at=at(3))
    older = factories.post(world.private, world.agent, "sample status o", created_at=at(0))

    assert as_ids(search(world, "sample status")) == as_ids([private, direct, public, older])


def test_search_ties_within_a_conversation_follow_seq(world, descending_ids):
    tied = [
        factories.post(world.private, world.alice, f"sample status tie {i}", created_at=at(1))
        for i in range(4)
    ]

    assert as_ids(search(world, "sample status")) == as_ids(tied[::-1])


def test_search_is_bounded_by_limit(world):
    drafts = [
        services.MessageDraft(
            content=f"sample status {i}", sender_account_id=world.alice.id, created_at=at(i)
        )
        for i in range(25)
    ]
    messages = services.messages_create(conversation=world.public, drafts=drafts)

    assert as_ids(search(world, "sample status", limit=20)) == as_ids(messages[:4:-1])
    assert as_ids(search(world, "sample status", limit=3)) == as_ids(messages[:21:-1])
    assert len(search(world, "sample status", limit=100)) == 25


def test_search_narrows_to_a_conversation(world):
    factories.post(world.public, world.alice, "sample status p", created_at=at(1))
    inside = post_all(world.private, world.alice, ["sample status a", "sample status b"], start=2)

    assert as_ids(search(world, "status", conversation=world.private)) == as_ids(inside[::-1])


def test_search_narrowed_to_unavailable_conversation_is_not_found(world):
    never, _ = never_joined_room(world.workspace, world.alice)
    left, _ = left_room(world.workspace, world.agent, world.alice)
    _, _, foreign, _ = other_workspace()

    for conversation_id in (never.id, left.id, foreign.id, uuid.uuid4()):
        with pytest.raises(NotFound):
            selectors.message_search(
                **scope(world), query="sample", limit=20, conversation_id=conversation_id
            )


def test_search_skips_deleted_left_unjoined_and_foreign_messages(world):
    visible = factories.post(world.public, world.alice, "sample status here", created_at=at(0))
    gone = factories.post(world.private, world.alice, "sample status gone", created_at=at(5))
    services.message_delete(message=gone)
    never_joined_room(world.workspace, world.alice)
    left_room(world.workspace, world.agent, world.alice)
    _, foreign_agent, _, foreign = other_workspace()

    assert as_ids(search(world, "sample status")) == [visible.id]
    theirs = selectors.message_search(
        workspace_id=foreign.workspace_id, agent_id=foreign_agent.id, query="status", limit=20
    )
    assert as_ids(theirs) == [foreign.id]


def test_search_with_the_wrong_workspace_finds_nothing(world):
    factories.post(world.public, world.alice, "sample status", created_at=at(0))
    other, _, _, _ = other_workspace()

    found = selectors.message_search(
        workspace_id=other.id, agent_id=world.agent.id, query="sample status", limit=20
    )

    assert found == []


def test_search_uses_the_trigram_index(world):
    # A planner's choice on a handful of rows says nothing about production: at that size the
    # workspace btree is always cheaper. So: a realistic corpus in which the term is rare, fresh
    # statistics (ANALYZE sees this transaction's own rows), and sequential scans priced out.
    # Below ~8,000 rows the planner still prefers the btree indexes; 10,000 is reliably past it.
    for start in (0, 5_000):
        drafts = [
            services.MessageDraft(
                content=f"sample status {i}" if i % 1_000 == 0 else f"plain filler text {i}",
                sender_account_id=world.alice.id,
                created_at=at(i % 1_000),
            )
            for i in range(start, start + 5_000)
        ]
        services.messages_create(conversation=world.public, drafts=drafts)
    matching = selectors.agent_visible_messages(**scope(world)).filter(content__icontains="status")
    # The queryset without the model's default ordering, and the one message_search runs.
    querysets = [matching.order_by(), matching.order_by("-created_at", "-seq", "-id")[:20]]

    plans = []
    for queryset in querysets:
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("ANALYZE messages_app_message")
                cursor.execute("SET LOCAL enable_seqscan = off")
            plans.append(queryset.explain())

    for plan in plans:
        assert "message_content_trgm" in plan, plan
    assert len(search(world, "status", limit=100)) == 10


@pytest.mark.parametrize("walk", [1, 7, 40, 10_000])
@pytest.mark.parametrize(("word", "limit"), [("every", 5), ("tenth", 5), ("rare", 5), ("none", 5)])
def test_search_answers_the_same_whichever_step_finds_the_matches(
    world, monkeypatch, walk, word, limit
):
    """The newest-first walk and the whole-history search must agree with one plain
    ``ORDER BY ... LIMIT``: with the walk shortened or lengthened, a word in every message, in
    one in ten, in three, or in none gets the same answer, ties and other rooms included."""
    contents = []
    for i in range(60):
        words = ["every"]
        if i % 10 == 0:
            words.append("tenth")
        if i in (3, 31, 57):
            words.append("rare")
        contents.append(" ".join(words) + f" {i}")
    rooms = [world.public, world.private, world.direct]
    for i, content in enumerate(contents):
        factories.post(rooms[i % 3], world.alice, content, created_at=at(i // 2))
    left, _ = left_room(world.workspace, world.agent, world.alice)
    factories.post(left, world.alice, "every tenth rare", created_at=at(99))
    monkeypatch.setattr(selectors, "SEARCH_WALK", walk)

    expected = (
        selectors.agent_visible_messages(**scope(world))
        .filter(content__icontains=word)
        .order_by("-created_at", "-seq", "-id")[:limit]
    )

    assert as_ids(search(world, word, limit=limit)) == as_ids(list(expected))
