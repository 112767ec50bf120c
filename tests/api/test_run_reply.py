"""A run's evidence and its reply over HTTP (SPEC §2 "Evidence", §4, §5, §8).

Evidence: every message an agent tool returns to a *run* token is recorded once, with the tool
that first returned it; an agent token records nothing; a call that fails records nothing; a
finished run's tools answer ``forbidden``. The reply: ``POST /api/v1/runs/{id}/reply`` with the
run's own token stores one ``assistant`` message in the destination, replying to the run's
current message, with the evidence (and its closure) as lineage, and finishes the run.

The ``world`` fixture joins everyone "now", so messages posted without a date are observed by
the agent; all text is synthetic.
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from django.db import connection
from rest_framework.test import APIClient

from messages_app import services
from messages_app.models import Message, MessageLineage, Run, RunEvidence
from search_app.models import AgentMemory, RunMemory
from search_app.runs import services as runs
from tests import factories
from tests.factories import SUMMARY_KEYS, make_run, post

LIST_URL = "/api/v1/messages"
SEARCH_URL = "/api/v1/messages/search"
HISTORY_URL = "/api/v1/history/search"
MEMORIES_URL = "/api/v1/memories"


def reply_url(run_id) -> str:
    return f"/api/v1/runs/{run_id}/reply"


def memories_url(run_id) -> str:
    return f"/api/v1/runs/{run_id}/memories"


def message_url(message_id) -> str:
    return f"/api/v1/messages/{message_id}"


def reply(api, run_id, content="sample answer", **extra):
    return api.post(reply_url(run_id), {"content": content}, format="json", **extra)


def list_messages(api, conversation, **params):
    return api.get(LIST_URL, {"conversationId": str(conversation.id), **params})


def evidence(run: Run) -> dict:
    """The run's evidence: message id -> the tool that first returned it."""
    return dict(RunEvidence.objects.filter(run=run).values_list("message_id", "tool"))


def assert_error(response, status: int, code: str) -> dict:
    assert response.status_code == status, response.content
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message", "details"}
    assert body["error"]["code"] == code
    return body["error"]


def agent_messages(conversation) -> list[Message]:
    return list(
        Message.objects.filter(conversation=conversation, sender_agent__isnull=False).order_by(
            "seq"
        )
    )


def lineage_rows(message) -> set[tuple]:
    return set(MessageLineage.objects.filter(message=message).values_list("source_id", "direct"))


# --- evidence ---------------------------------------------------------------------------------


@pytest.mark.django_db
def test_each_tool_records_what_it_returns_once_with_the_first_tool(world):
    older = [post(world.private, world.alice, f"sample alpha {i}") for i in range(4)]
    elsewhere = post(world.public, world.bob, "sample bravo elsewhere")
    run, api = make_run(world.agent, world.private, world.alice)

    page = list_messages(api, world.private, limit=2)
    assert page.status_code == 200, page.content
    newest_two = {older[3].id, older[2].id}
    assert evidence(run) == dict.fromkeys(newest_two, "list_messages")

    # A wider page re-reads two of them: one row per message, still list_messages.
    assert list_messages(api, world.private, limit=3).status_code == 200
    assert evidence(run) == dict.fromkeys({*newest_two, older[1].id}, "list_messages")
    assert RunEvidence.objects.filter(run=run).count() == 3

    # get_message of a message already read keeps the first tool; a new one is get_message.
    assert api.get(message_url(older[2].id)).status_code == 200
    assert api.get(message_url(older[0].id)).status_code == 200
    assert evidence(run)[older[2].id] == "list_messages"
    assert evidence(run)[older[0].id] == "get_message"

    # search_messages over every room: only the message not yet seen is search_messages.
    found = api.get(SEARCH_URL, {"query": "sample"})
    assert found.status_code == 200, found.content
    assert {item["id"] for item in found.json()["items"]} == {
        str(m.id) for m in [*older, elsewhere]
    }
    assert evidence(run)[elsewhere.id] == "search_messages"
    assert RunEvidence.objects.filter(run=run).count() == 5

    # search_history returns them all again: nothing new, so nothing spent from the budget.
    searched = api.post(HISTORY_URL, {"query": "sample"}, format="json")
    assert searched.status_code == 200, searched.content
    assert searched.json()["budget"]["used"] == 0
    assert RunEvidence.objects.filter(run=run).count() == 5

    # A new message found by search_history is search_history's, and costs one.
    fresh = post(world.public, world.bob, "sample charlie fresh")
    searched = api.post(HISTORY_URL, {"query": "charlie"}, format="json")
    assert [item["id"] for item in searched.json()["items"]] == [str(fresh.id)]
    assert searched.json()["budget"]["used"] == 1
    assert evidence(run) == {
        older[3].id: "list_messages",
        older[2].id: "list_messages",
        older[1].id: "list_messages",
        older[0].id: "get_message",
        elsewhere.id: "search_messages",
        fresh.id: "search_history",
    }


@pytest.mark.django_db
def test_positional_listing_records_the_anchor_and_its_neighbours(world):
    messages = [post(world.private, world.alice, f"sample {i}") for i in range(5)]
    run, api = make_run(world.agent, world.private, world.alice)
    page = list_messages(api, world.private, around=str(messages[2].id), limit=2)
    assert page.status_code == 200, page.content
    assert evidence(run) == dict.fromkeys(
        {messages[1].id, messages[2].id, messages[3].id}, "list_messages"
    )


@pytest.mark.django_db
def test_search_history_records_hits_and_neighbours(world):
    before = post(world.private, world.alice, "sample context before")
    hit = post(world.private, world.bob, "sample needleword")
    after = post(world.private, world.alice, "sample context after")
    run, api = make_run(world.agent, world.private, world.alice)
    response = api.post(HISTORY_URL, {"query": "needleword"}, format="json")
    assert response.status_code == 200, response.content
    assert evidence(run) == dict.fromkeys({before.id, hit.id, after.id}, "search_history")


@pytest.mark.django_db
def test_an_agent_token_records_nothing(world):
    messages = [post(world.private, world.alice, f"sample {i}") for i in range(3)]
    # An open run of the same agent exists: an agent-token call must not be charged to it.
    run, _ = make_run(world.agent, world.private, world.alice)
    api = world.agent_api
    assert list_messages(api, world.private).status_code == 200
    assert list_messages(api, world.private, around=str(messages[1].id)).status_code == 200
    assert api.get(message_url(messages[0].id)).status_code == 200
    assert api.get(SEARCH_URL, {"query": "sample"}).status_code == 200
    assert RunEvidence.objects.count() == 0
    run.refresh_from_db()
    assert run.finished_at is None


@pytest.mark.django_db
def test_a_failed_call_records_nothing(world):
    message = post(world.private, world.alice, "sample status")
    stranger_room, unseen = factories.never_joined_room(world.workspace, world.bob)
    _, api = make_run(world.agent, world.private, world.alice)
    failures = [
        (api.get(message_url(uuid.uuid4())), 404),
        (api.get(message_url(unseen.id)), 404),
        (list_messages(api, stranger_room), 404),
        (list_messages(api, world.private, limit=0), 400),
        (list_messages(api, world.private, around=str(uuid.uuid4())), 404),
        (list_messages(api, world.private, around=str(unseen.id)), 404),
        (list_messages(api, world.private, before=str(message.id), after=str(message.id)), 400),
        (api.get(SEARCH_URL, {"query": "sample", "limit": 0}), 400),
        (api.get(SEARCH_URL, {"query": "sample", "conversationId": str(stranger_room.id)}), 404),
        (api.post(HISTORY_URL, {"query": "the and of"}, format="json"), 400),
        (api.post(HISTORY_URL, {"query": "sample", "limit": 21}, format="json"), 400),
        (api.get(MEMORIES_URL, {"query": "the and of"}), 400),
    ]
    for response, status in failures:
        assert response.status_code == status, response.content
    assert RunEvidence.objects.count() == 0
    assert RunMemory.objects.count() == 0


@pytest.mark.django_db
def test_a_finished_runs_tools_are_closed(world):
    message = post(world.private, world.alice, "sample status")
    later = post(world.private, world.bob, "sample later")
    run, api = make_run(world.agent, world.private, world.alice)
    assert api.get(message_url(message.id)).status_code == 200
    assert reply(api, run.id).status_code == 201
    recorded = evidence(run)

    closed = [
        list_messages(api, world.private),
        list_messages(api, world.private, around=str(later.id)),
        api.get(message_url(later.id)),
        api.get(message_url(uuid.uuid4())),
        api.get(SEARCH_URL, {"query": "sample"}),
        api.post(HISTORY_URL, {"query": "sample"}, format="json"),
        api.get(MEMORIES_URL, {"query": "sample"}),
    ]
    for response in closed:
        assert_error(response, 403, "forbidden")
    assert evidence(run) == recorded
    assert RunMemory.objects.count() == 0
    # A memory may still be written after the reply; a second reply may not.
    assert api.post(memories_url(run.id), {"content": "noted"}, format="json").status_code == 201
    assert_error(reply(api, run.id, "again"), 400, "invalid_arguments")
    # The agent's own token is not a run: it is not closed.
    assert world.agent_api.get(message_url(later.id)).status_code == 200


# --- the reply --------------------------------------------------------------------------------


@pytest.mark.django_db
def test_reply_is_stored_with_its_lineage_and_finishes_the_run(world):
    private_source = post(world.private, world.bob, "sample private source")
    derived = post(world.public, world.agent, "sample derived", lineage=[private_source.id])
    plain = post(world.public, world.bob, "sample plain public")
    question = post(world.private, world.alice, "sample question")
    run, api = make_run(world.agent, world.private, world.alice, current=question)
    for message in (derived, plain):
        assert api.get(message_url(message.id)).status_code == 200

    response = reply(api, run.id, "sample answer text")
    assert response.status_code == 201, response.content
    body = response.json()
    assert set(body) == SUMMARY_KEYS | {"senderAgentId"}
    stored = Message.objects.get(pk=body["id"])
    assert body == {
        "id": str(stored.id),
        "conversationId": str(world.private.id),
        "seq": question.seq + 1,
        "role": "assistant",
        "status": stored.status,
        "senderAgentId": str(world.agent.id),
        "replyToId": str(question.id),
        "threadId": None,
        "content": "sample answer text",
        "createdAt": body["createdAt"],
        "sourcesErased": False,
    }
    assert stored.content == "sample answer text"
    assert stored.sender_agent_id == world.agent.id
    # Direct sources: the prompt and the evidence; inherited: their own lineage.
    assert lineage_rows(stored) == {
        (question.id, True),
        (derived.id, True),
        (plain.id, True),
        (private_source.id, False),
    }
    run.refresh_from_db()
    assert run.finished_at is not None
    # The agent sees its reply like any other message.
    listed = list_messages(world.agent_api, world.private, limit=1)
    assert listed.json()["items"][0]["id"] == str(stored.id)


@pytest.mark.django_db
def test_a_reply_without_evidence_or_current_message_has_no_lineage(world):
    run, api = make_run(world.agent, world.direct, world.alice)
    response = reply(api, run.id)
    assert response.status_code == 201, response.content
    assert response.json()["replyToId"] is None
    assert lineage_rows(Message.objects.get(pk=response.json()["id"])) == set()


@pytest.mark.django_db
def test_a_run_replies_once(world):
    run, api = make_run(world.agent, world.private, world.alice)
    assert reply(api, run.id, "first").status_code == 201
    finished = Run.objects.get(pk=run.pk).finished_at
    error = assert_error(reply(api, run.id, "second"), 400, "invalid_arguments")
    assert "second" not in str(error)
    assert [m.content for m in agent_messages(world.private)] == ["first"]
    assert Run.objects.get(pk=run.pk).finished_at == finished


@pytest.mark.django_db
def test_another_runs_token_gets_the_same_not_found_as_a_random_id(world):
    mine, my_api = make_run(world.agent, world.private, world.alice)
    other, _ = make_run(world.agent, world.public, world.bob)
    _, foreign_agent, foreign_room, _ = factories.other_workspace()
    foreign_run, _ = make_run(
        foreign_agent, foreign_room, foreign_room.memberships.get(agent__isnull=True).account
    )
    responses = [
        reply(my_api, other.id),
        reply(my_api, uuid.uuid4()),
        reply(my_api, foreign_run.id),
        # The body is not even looked at for someone else's run.
        my_api.post(reply_url(other.id), {"bogus": 1}, format="json"),
    ]
    for response in responses:
        assert_error(response, 404, "not_found")
    assert len({r.content for r in responses}) == 1
    assert Message.objects.filter(sender_agent__isnull=False).count() == 0
    assert Run.objects.filter(finished_at__isnull=False).count() == 0
    assert reply(my_api, mine.id).status_code == 201


@pytest.mark.django_db
def test_only_a_run_token_may_reply(world):
    run, _ = make_run(world.agent, world.private, world.alice)
    assert_error(reply(world.agent_api, run.id), 403, "forbidden")
    assert_error(reply(world.service, run.id), 403, "forbidden")
    assert_error(
        reply(factories.bearer_client("fmn_run_not-a-token"), run.id), 401, "unauthenticated"
    )
    anonymous = reply(APIClient(), run.id)
    assert_error(anonymous, 401, "unauthenticated")
    assert agent_messages(world.private) == []
    run.refresh_from_db()
    assert run.finished_at is None


BAD_BODIES = {
    "missing content": {},
    "blank content": {"content": ""},
    "null content": {"content": None},
    "unknown field": {"content": "sample", "lineage": []},
    "number": {"content": 5},
    "list": {"content": ["sample"]},
    "object": {"content": {"text": "sample"}},
    "too long": {"content": "x" * 100_001},
    "not an object": ["sample"],
}


@pytest.mark.django_db
@pytest.mark.parametrize("body", BAD_BODIES.values(), ids=BAD_BODIES.keys())
def test_a_bad_reply_body_is_invalid_and_stores_nothing(world, body):
    evidence_message = post(world.private, world.alice, "sample status")
    run, api = make_run(world.agent, world.private, world.alice)
    assert api.get(message_url(evidence_message.id)).status_code == 200
    assert_error(api.post(reply_url(run.id), body, format="json"), 400, "invalid_arguments")
    assert agent_messages(world.private) == []
    run.refresh_from_db()
    assert run.finished_at is None
    # The run is still open: a good body now goes through.
    assert reply(api, run.id).status_code == 201


@pytest.mark.django_db
def test_malformed_json_and_query_keys_are_invalid(world):
    run, api = make_run(world.agent, world.private, world.alice)
    raw = api.post(reply_url(run.id), "{not json", content_type="application/json")
    assert_error(raw, 400, "invalid_arguments")
    with_query = api.post(reply_url(run.id) + "?content=x", {"content": "x"}, format="json")
    assert_error(with_query, 400, "invalid_arguments")
    assert agent_messages(world.private) == []


@pytest.mark.django_db
def test_the_longest_content_is_accepted(world):
    run, api = make_run(world.agent, world.private, world.alice)
    response = reply(api, run.id, "x" * 100_000)
    assert response.status_code == 201, response.content


# --- a reply racing a tool call on the same run ------------------------------------------------

WAIT = 30


def wait_for_lock_waiter() -> None:
    """Until some backend of this test database waits for a lock (the second caller): on Citus
    the run's row lives on a worker, so the wait is there (``citus_stat_activity`` shows every
    node's backends)."""
    deadline = time.monotonic() + WAIT
    activity = "citus_stat_activity" if connection.is_citus else "pg_stat_activity"
    with connection.cursor() as cursor:
        while time.monotonic() < deadline:
            cursor.execute(
                f"SELECT count(*) FROM {activity} "
                "WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
            if cursor.fetchone()[0]:
                return
            time.sleep(0.02)
    raise AssertionError("the second caller never waited for the run's lock")


def start_releaser(go: threading.Event) -> tuple[threading.Thread, list[bool]]:
    """A thread that sets ``go`` once the second caller waits for a lock (or gives up)."""
    waited: list[bool] = []

    def release() -> None:
        try:
            wait_for_lock_waiter()
            waited.append(True)
        except AssertionError:
            waited.append(False)
        finally:
            go.set()
            connection.close()

    releaser = threading.Thread(target=release)
    releaser.start()
    return releaser, waited


@pytest.mark.django_db(transaction=True)
def test_a_tool_call_holding_the_run_is_seen_by_the_reply(monkeypatch):
    """list_messages records evidence and pauses before committing; the reply must wait for
    it and then see that evidence (it blocks delivery: a private room, a public destination)."""
    workspace, agent, alice, public = factories.observed_public_room()
    secret = factories.make_conversation(workspace, "private", "secret")
    factories.join(secret, agent)
    factories.join(secret, alice)
    factories.make_account(workspace, "Bob Example")  # not in the secret room
    hidden = post(secret, alice, "sample secret")
    run, _ = make_run(agent, public, alice)
    _, raw = services.token_create(workspace_id=workspace.id, kind="run", agent=agent, run=run)

    recorded, go = threading.Event(), threading.Event()
    original = runs.run_evidence_record

    def record_then_pause(**kwargs):
        original(**kwargs)
        recorded.set()
        assert go.wait(WAIT)

    monkeypatch.setattr(runs, "run_evidence_record", record_then_pause)
    results: dict[str, object] = {}

    def work(index: int) -> None:
        client = factories.bearer_client(raw)
        if index == 0:
            results["list"] = list_messages(client, secret)
        else:
            assert recorded.wait(WAIT)
            results["reply"] = reply(client, run.id)

    releaser, waited = start_releaser(go)
    errors = factories.run_in_threads(2, work)
    releaser.join(WAIT)
    go.set()
    assert errors == []
    assert waited == [True], "the second caller never waited for the run's lock"

    assert results["list"].status_code == 200
    assert [item["id"] for item in results["list"].json()["items"]] == [str(hidden.id)]
    blocked = assert_error(results["reply"], 409, "delivery_blocked")
    assert blocked["details"] == {"blocked": 1, "reasons": {"audience": 1}}
    run.refresh_from_db()
    assert run.finished_at is None
    assert agent_messages(public) == []


@pytest.mark.django_db(transaction=True)
def test_a_tool_call_during_the_reply_waits_and_is_forbidden(monkeypatch):
    """The reply has checked its evidence and pauses before committing; list_messages must
    wait for it, then find the run finished and record nothing."""
    workspace, agent, alice, public = factories.observed_public_room()
    seen = post(public, alice, "sample seen")
    run, api = make_run(agent, public, alice)
    _, raw = services.token_create(workspace_id=workspace.id, kind="run", agent=agent, run=run)
    assert api.get(message_url(seen.id)).status_code == 200
    unseen = post(public, alice, "sample unseen")

    checked, go = threading.Event(), threading.Event()
    original = runs.delivery_blockers

    def check_then_pause(*args, **kwargs):
        result = original(*args, **kwargs)
        checked.set()
        assert go.wait(WAIT)
        return result

    monkeypatch.setattr(runs, "delivery_blockers", check_then_pause)
    results: dict[str, object] = {}

    def work(index: int) -> None:
        client = factories.bearer_client(raw)
        if index == 0:
            results["reply"] = reply(client, run.id)
        else:
            assert checked.wait(WAIT)
            results["list"] = list_messages(client, public)

    releaser, waited = start_releaser(go)
    errors = factories.run_in_threads(2, work)
    releaser.join(WAIT)
    go.set()
    assert errors == []
    assert waited == [True], "the second caller never waited for the run's lock"

    assert results["reply"].status_code == 201, results["reply"].content
    assert_error(results["list"], 403, "forbidden")
    assert evidence(run) == {seen.id: "get_message"}
    stored = Message.objects.get(pk=results["reply"].json()["id"])
    assert lineage_rows(stored) == {(seen.id, True)}
    assert unseen.id not in {source for source, _ in lineage_rows(stored)}


@pytest.mark.django_db(transaction=True)
def test_concurrent_replies_on_one_run_deliver_once():
    workspace, agent, alice, public = factories.observed_public_room()
    run, _ = make_run(agent, public, alice)
    _, raw = services.token_create(workspace_id=workspace.id, kind="run", agent=agent, run=run)
    statuses: list[int] = []

    def work(index: int) -> None:
        statuses.append(reply(factories.bearer_client(raw), run.id, f"answer {index}").status_code)

    assert factories.run_in_threads(4, work) == []
    assert sorted(statuses) == [201, 400, 400, 400]
    assert len(agent_messages(public)) == 1


@pytest.mark.django_db(transaction=True)
def test_racing_replies_and_tool_calls_never_leave_unchecked_evidence():
    """Free races (any interleaving): whatever the order, every evidence row of a finished run
    is in its reply's lineage, and a tool call either recorded before the reply or got 403."""
    workspace, agent, alice, public = factories.observed_public_room()
    for i in range(5):
        post(public, alice, f"sample {i}")
    for _ in range(4):
        run, _ = make_run(agent, public, alice)
        _, raw = services.token_create(workspace_id=workspace.id, kind="run", agent=agent, run=run)
        results: dict[int, object] = {}

        def work(index: int, raw=raw, run=run, results=results) -> None:
            client = factories.bearer_client(raw)
            if index == 0:
                results[index] = reply(client, run.id)
            else:
                results[index] = list_messages(client, public, limit=index)

        assert factories.run_in_threads(4, work) == []
        assert results[0].status_code == 201, results[0].content
        stored = Message.objects.get(pk=results[0].json()["id"])
        # Earlier runs' replies are in the room too: compare the direct sources only.
        sources = {source for source, direct in lineage_rows(stored) if direct}
        assert set(evidence(run)) == sources
        for index in (1, 2, 3):
            assert results[index].status_code in (200, 403), results[index].content
        listed = {
            uuid.UUID(item["id"])
            for index in (1, 2, 3)
            if results[index].status_code == 200
            for item in results[index].json()["items"]
        }
        assert listed == sources
        assert AgentMemory.objects.count() == 0


@pytest.mark.django_db
def test_a_run_that_read_a_long_history_can_still_reply(world):
    """list_messages has no evidence ceiling (only search_history's 400 does), and the reply's
    lineage once went through message ingestion's cap of 20,000 sources per request, so a run
    that paged through a long history could never reply (400 invalid_arguments).

    The 20,000 rows are analysed before the reply, as autovacuum would have them in a real
    database. Without that, a pooled connection that earlier tests left with plans cached for
    an almost empty messages table (the per-row foreign-key and lineage-trigger look-ups, a
    sequential scan each) took over 60 s here, twice in three full runs."""
    drafts = [
        services.MessageDraft(content=f"sample {i}", sender_account_id=world.alice.id)
        for i in range(5_000)
    ]
    for _ in range(4):
        services.messages_create(conversation=world.public, drafts=drafts)
    services.messages_create(conversation=world.public, drafts=drafts[:1])
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE messages_app_message")
    run, api = make_run(world.agent, world.public, world.alice)
    # What 101 pages of list_messages record, in one call of the service the tool uses.
    runs.run_evidence_record(
        workspace_id=world.workspace.id,
        run_id=run.id,
        message_ids=Message.objects.filter(conversation=world.public).values_list("id", flat=True),
        tool="list_messages",
    )
    page = list_messages(api, world.public, limit=200, offset=20_000)
    assert page.status_code == 200, page.content
    assert RunEvidence.objects.filter(run=run).count() == 20_001
    response = reply(api, run.id)
    assert response.status_code == 201, response.content
    stored = Message.objects.get(pk=response.json()["id"])
    assert MessageLineage.objects.filter(message=stored).count() == 20_001
