"""The final delivery check and lineage inheritance (SPEC §3 rule 4, §4).

A reply is delivered only if every evidence message still passes rules 1-4 for the destination
*at delivery time*; otherwise ``delivery_blocked`` (409) with counts by reason, nothing stored
and the run left open. A delivered reply carries the evidence as its lineage, so later searches
only return it (or a reply based on it) where every inherited restriction allows.

Every scenario builds its own small tenant. Rooms are joined long before ``T0`` and messages are
dated around it, so the agent observed them (rule 1); evidence comes from the real tools.
"""

from __future__ import annotations

from datetime import datetime

import pytest

from messages_app import services
from messages_app.models import (
    Account,
    Agent,
    Conversation,
    IdentityLink,
    Message,
    MessageLineage,
    Run,
    RunEvidence,
    Workspace,
)
from tests.factories import (
    at,
    history,
    hit_ids,
    join,
    make_account,
    make_agent,
    make_conversation,
    make_run,
    make_workspace,
    post,
)

pytestmark = pytest.mark.django_db

EARLY = at(-600)


# --- building blocks ---------------------------------------------------------------------------


def tenant(accounts: int) -> tuple[Workspace, Agent, list[Account]]:
    workspace = make_workspace()
    return workspace, make_agent(workspace), [make_account(workspace) for _ in range(accounts)]


def room(
    workspace: Workspace, kind: str, *members: Account | Agent, since: datetime = EARLY
) -> Conversation:
    conversation = make_conversation(workspace, kind)
    for member in members:
        join(conversation, member, joined_at=since)
    return conversation


def live_link(a: Account, b: Account) -> IdentityLink:
    made = services.identity_link_create(
        workspace_id=a.workspace_id, account_id=a.id, linked_account_id=b.id
    )
    return services.identity_link_verify(link=made)


def reply(api, run: Run, content: str = "sample reply"):
    return api.post(f"/api/v1/runs/{run.id}/reply", {"content": content}, format="json")


def delivered(api, run: Run, content: str = "sample reply") -> Message:
    response = reply(api, run, content)
    assert response.status_code == 201, response.content
    return Message.objects.get(pk=response.json()["id"])


def assert_blocked(response, reasons: dict[str, int]) -> None:
    assert response.status_code == 409, response.content
    error = response.json()["error"]
    assert error["code"] == "delivery_blocked"
    assert error["details"] == {"blocked": sum(reasons.values()), "reasons": reasons}


def assert_nothing_stored(run: Run, destination: Conversation, agent_messages: int = 0) -> None:
    run.refresh_from_db()
    assert run.finished_at is None
    stored = Message.objects.filter(conversation=destination, sender_agent__isnull=False)
    assert stored.count() == agent_messages


def sources(message: Message) -> set:
    return set(MessageLineage.objects.filter(message=message).values_list("source_id", flat=True))


# --- identity links: direct-room continuity ----------------------------------------------------


def linked_direct_rooms():
    """S: a direct room with R1; D: a direct room with R2, R2 linked to R1 (live)."""
    workspace, agent, (r1, r2) = tenant(2)
    link = live_link(r2, r1)
    source = room(workspace, "direct", agent, r1)
    said = post(source, r1, "probeword notes", created_at=at(1))
    destination = room(workspace, "direct", agent, r2)
    return workspace, agent, (r1, r2), link, source, said, destination


def test_a_live_link_lets_a_direct_room_reach_the_linked_persons_room():
    _, agent, (_, r2), _, _, said, destination = linked_direct_rooms()
    run, api = make_run(agent, destination, r2)
    assert hit_ids(run, "probeword") == [said.id]
    answer = delivered(api, run)
    assert sources(answer) == {said.id}


def test_revoking_the_link_after_the_search_blocks_the_reply():
    _, agent, (r1, r2), link, _, said, destination = linked_direct_rooms()
    run, api = make_run(agent, destination, r2)
    assert hit_ids(run, "probeword") == [said.id]
    services.identity_link_revoke(link=link)

    response = reply(api, run, "sample reply with private detail")
    assert_blocked(response, {"audience": 1})
    # Which message blocked it is not said.
    assert str(said.id) not in response.content.decode()
    assert_nothing_stored(run, destination)
    assert set(RunEvidence.objects.filter(run=run).values_list("message_id", flat=True)) == {
        said.id
    }
    # Still open: its tools answer, and the same reply blocks again.
    listed = api.get("/api/v1/messages", {"conversationId": str(destination.id)})
    assert listed.status_code == 200, listed.content
    assert_blocked(reply(api, run), {"audience": 1})

    # A new run that never read the direct room may answer.
    fresh_run, fresh_api = make_run(agent, destination, r2)
    assert hit_ids(fresh_run, "probeword") == []
    assert sources(delivered(fresh_api, fresh_run)) == set()

    # A new live link restores continuity: the blocked run was left open and can now deliver.
    live_link(r1, r2)
    assert sources(delivered(api, run)) == {said.id}


def test_a_link_still_pending_at_delivery_does_not_reopen_it():
    workspace, agent, (r1, r2), link, _, said, destination = linked_direct_rooms()
    run, api = make_run(agent, destination, r2)
    assert hit_ids(run, "probeword") == [said.id]
    services.identity_link_revoke(link=link)
    services.identity_link_create(
        workspace_id=workspace.id, account_id=r1.id, linked_account_id=r2.id
    )
    assert_blocked(reply(api, run), {"audience": 1})
    assert_nothing_stored(run, destination)


def test_a_second_reader_in_a_direct_destination_blocks_direct_evidence():
    _, agent, (r1, r2), _, _, said, destination = linked_direct_rooms()
    run, api = make_run(agent, destination, r2)
    assert hit_ids(run, "probeword") == [said.id]
    join(destination, r1)  # even the source's own reader: D no longer has one reader
    assert_blocked(reply(api, run), {"audience": 1})
    assert_nothing_stored(run, destination)


# --- readers added to the destination ---------------------------------------------------------


@pytest.mark.parametrize("newcomer_in_source", [False, True], ids=["stranger", "source-reader"])
def test_a_reader_added_to_a_private_destination(newcomer_in_source):
    """Blocks the reply unless the newcomer also reads the private source."""
    workspace, agent, (r, b, c) = tenant(3)
    source = room(workspace, "private", agent, r, b)
    said = post(source, b, "probeword notes", created_at=at(1))
    destination = room(workspace, "private", agent, r)
    run, api = make_run(agent, destination, r)
    assert hit_ids(run, "probeword") == [said.id]

    join(destination, b if newcomer_in_source else c)
    if newcomer_in_source:
        assert sources(delivered(api, run)) == {said.id}
    else:
        assert_blocked(reply(api, run), {"audience": 1})
        assert_nothing_stored(run, destination)


def test_a_new_account_widens_a_public_destination_and_blocks_private_evidence():
    """A public room is read by every account of the workspace, including one created now."""
    workspace, agent, (r, b) = tenant(2)
    source = room(workspace, "private", agent, r, b)
    said = post(source, b, "probeword notes", created_at=at(1))
    destination = room(workspace, "public", agent, r)
    run, api = make_run(agent, destination, r)
    assert hit_ids(run, "probeword") == [said.id]
    make_account(workspace, "Newcomer Example")
    assert_blocked(reply(api, run), {"audience": 1})
    assert_nothing_stored(run, destination)


def test_a_reader_leaving_the_source_blocks_the_reply():
    workspace, agent, (r, b) = tenant(2)
    source = room(workspace, "private", agent, r, b)
    said = post(source, b, "probeword notes", created_at=at(1))
    destination = room(workspace, "private", agent, r)
    run, api = make_run(agent, destination, r)
    assert hit_ids(run, "probeword") == [said.id]
    services.membership_leave(conversation=source, account_id=r.id)
    assert_blocked(reply(api, run), {"audience": 1})
    assert_nothing_stored(run, destination)


# --- deletion, lineage, several reasons at once -----------------------------------------------


def test_deleting_an_evidence_message_blocks_the_reply():
    workspace, agent, (r, b) = tenant(2)
    source = room(workspace, "public", agent, b)
    first = post(source, b, "probeword one", created_at=at(1))
    second = post(source, b, "probeword two", created_at=at(2))
    destination = room(workspace, "private", agent, r)
    run, api = make_run(agent, destination, r)
    assert set(hit_ids(run, "probeword")) == {first.id, second.id}
    services.message_delete(message=first)
    response = reply(api, run)
    assert_blocked(response, {"deleted": 1})
    assert str(first.id) not in response.content.decode()
    assert_nothing_stored(run, destination)


def test_evidence_whose_own_source_no_longer_permits_blocks_with_reason_lineage():
    workspace, agent, (r, b, c) = tenant(3)
    public = room(workspace, "public", agent, r, b)
    secret = room(workspace, "private", agent, r, b)
    origin = post(secret, b, "probeword origin", created_at=at(1))
    derived = post(public, agent, "derivedword summary", created_at=at(2), lineage=[origin.id])
    destination = room(workspace, "private", agent, r)
    run, api = make_run(agent, destination, r)
    assert hit_ids(run, "derivedword") == [derived.id]
    join(destination, c)
    assert_blocked(reply(api, run), {"lineage": 1})
    assert_nothing_stored(run, destination)


def test_reasons_are_counted_per_message():
    workspace, agent, (r, b, c) = tenant(3)
    public = room(workspace, "public", agent, r, b)
    secret = room(workspace, "private", agent, r, b)
    origin = post(secret, b, "alphaword origin", created_at=at(1))
    derived = post(public, agent, "bravoword summary", created_at=at(2), lineage=[origin.id])
    plain = post(public, b, "charlieword plain", created_at=at(3))
    destination = room(workspace, "private", agent, r)
    run, api = make_run(agent, destination, r)
    found = set(hit_ids(run, "alphaword bravoword charlieword"))
    assert found == {origin.id, derived.id, plain.id}
    join(destination, c)  # origin: audience; derived: lineage
    services.message_delete(message=plain)  # deleted
    assert_blocked(reply(api, run), {"audience": 1, "lineage": 1, "deleted": 1})
    assert_nothing_stored(run, destination)


def test_evidence_read_by_listing_passes_the_same_rules():
    """list_messages reads any room the agent is in; at delivery its messages face rules 1-4
    like search hits: an unknown audience and a message the agent never observed block."""
    workspace, agent, (r, b) = tenant(2)
    destination = room(workspace, "private", agent, r)
    unknown = room(workspace, "unknown", agent, r)
    post(unknown, r, "sample unknown audience", created_at=at(1))
    public = room(workspace, "public", b)
    join(public, agent, joined_at=at(10))
    post(public, b, "sample before the agent joined", created_at=at(1))
    post(public, b, "sample after the agent joined", created_at=at(11))
    run, api = make_run(agent, destination, r)
    for conversation in (unknown, public):
        listed = api.get("/api/v1/messages", {"conversationId": str(conversation.id)})
        assert listed.status_code == 200, listed.content
    assert RunEvidence.objects.filter(run=run).count() == 3
    assert_blocked(reply(api, run), {"unknownAudience": 1, "notObserved": 1})
    assert_nothing_stored(run, destination)


def test_a_leave_recorded_after_the_search_that_predates_the_evidence_blocks_it():
    """Rule 1 is read again at delivery: the runtime may record a past leave (an import
    catching up), after which the agent never observed the message it was shown."""
    workspace, agent, (r, b) = tenant(2)
    source = room(workspace, "public", agent, b)
    said = post(source, b, "probeword notes", created_at=at(5))
    destination = room(workspace, "private", agent, r)
    run, api = make_run(agent, destination, r)
    assert hit_ids(run, "probeword") == [said.id]
    services.membership_leave(conversation=source, agent_id=agent.id, left_at=at(3))
    assert_blocked(reply(api, run), {"notObserved": 1})
    assert_nothing_stored(run, destination)


def test_the_current_message_and_recent_history_never_block_the_reply():
    """Rule 5 is about what a run is shown, not what it may say."""
    workspace, agent, (r,) = tenant(1)
    destination = room(workspace, "private", agent, r)
    earlier = post(destination, r, "sample earlier", created_at=at(1))
    question = post(destination, r, "sample question", created_at=at(2))
    run, api = make_run(agent, destination, r, current=question, recent=(earlier,))
    listed = api.get("/api/v1/messages", {"conversationId": str(destination.id)})
    assert listed.status_code == 200, listed.content
    answer = delivered(api, run)
    assert sources(answer) == {earlier.id, question.id}
    assert answer.reply_to_id == question.id


def test_one_runs_evidence_never_blocks_another_runs_reply():
    """Another run's evidence never blocks this run's reply, and vice versa."""
    workspace, agent, (r, b) = tenant(2)
    secret = room(workspace, "private", agent, r)
    said = post(secret, r, "probeword notes", created_at=at(1))
    public = room(workspace, "public", agent, r, b)
    private = room(workspace, "private", agent, r)
    reader, reader_api = make_run(agent, private, r)
    assert hit_ids(reader, "probeword") == [said.id]
    other, other_api = make_run(agent, public, r)
    assert sources(delivered(other_api, other)) == set()
    assert sources(delivered(reader_api, reader)) == {said.id}


# --- later searches inherit the reply's lineage -------------------------------------------------


def test_replies_based_on_a_private_source_are_withheld_once_it_stops_permitting():
    """Every account reads the private source, so a public room may hear a reply based on it
    (one level) and a reply based on that reply (two levels). Once a new account exists, the
    source no longer permits a public destination: neither reply is returned there, as a hit
    or as a neighbour, while a destination the source still permits gets both."""
    workspace, agent, (r, b) = tenant(2)
    secret = room(workspace, "private", agent, r, b)
    said = post(secret, b, "secretword plan", created_at=at(1))
    public = room(workspace, "public", agent, r, b)

    first_run, first_api = make_run(agent, public, r)
    assert hit_ids(first_run, "secretword") == [said.id]
    first = delivered(first_api, first_run, "replyword first")
    second_run, second_api = make_run(agent, public, r)
    assert hit_ids(second_run, "replyword") == [first.id]
    second = delivered(second_api, second_run, "echoword second")
    assert set(
        MessageLineage.objects.filter(message=second).values_list("source_id", "direct")
    ) == {(first.id, True), (said.id, False)}
    closing = post(public, r, "closingword thanks")

    before, _ = make_run(agent, public, r)
    assert set(hit_ids(before, "replyword echoword")) == {first.id, second.id}

    make_account(workspace, "Newcomer Example")
    after, _ = make_run(agent, public, r)
    assert hit_ids(after, "replyword echoword") == []
    (hit,) = history(after, "closingword").hits
    assert hit.message.id == closing.id
    assert hit.before == []
    # The source itself is withheld from the public room now, like the replies based on it.
    assert hit_ids(after, "secretword") == []

    private = room(workspace, "private", agent, r)
    narrow, _ = make_run(agent, private, r)
    assert set(hit_ids(narrow, "replyword echoword")) == {first.id, second.id}


def test_replies_based_on_a_linked_direct_room_do_not_travel_along_a_second_link():
    """R1's direct room reaches R2's (live link R1-R2); R2's rooms reach R3's (live link R2-R3),
    but links do not chain: a reply in R2's room based on R1's room, or a reply based on that
    reply in R2's other room, is withheld from R3's room, while R2's own words are not."""
    workspace, agent, (r1, r2, r3) = tenant(3)
    live_link(r1, r2)
    live_link(r2, r3)
    first_room = room(workspace, "direct", agent, r1)
    said = post(first_room, r1, "secretword plan", created_at=at(1))
    second_room = room(workspace, "direct", agent, r2)
    second_room_again = room(workspace, "direct", agent, r2)
    third_room = room(workspace, "direct", agent, r3)

    run, api = make_run(agent, second_room, r2)
    assert hit_ids(run, "secretword") == [said.id]
    first = delivered(api, run, "replyword first")
    run, api = make_run(agent, second_room_again, r2)
    assert hit_ids(run, "replyword") == [first.id]
    second = delivered(api, run, "echoword second")
    plain = post(second_room, r2, "plainword from the second person")

    third, third_api = make_run(agent, third_room, r3)
    assert hit_ids(third, "replyword echoword secretword") == []
    (hit,) = history(third, "plainword").hits
    assert hit.message.id == plain.id
    assert hit.before == []  # the reply just before it is withheld too
    # Nothing it read blocks its own reply.
    assert sources(delivered(third_api, third)) == {plain.id}

    # R2's rooms still see both replies.
    check, _ = make_run(agent, second_room, r2)
    assert set(hit_ids(check, "replyword echoword")) == {first.id, second.id}
    assert second.conversation_id == second_room_again.id


def test_a_blocked_reply_leaves_nothing_for_later_searches():
    workspace, agent, (r, b, c) = tenant(3)
    secret = room(workspace, "private", agent, r, b)
    post(secret, b, "probeword notes", created_at=at(1))
    destination = room(workspace, "private", agent, r)
    run, api = make_run(agent, destination, r)
    assert len(hit_ids(run, "probeword")) == 1
    join(destination, c)
    assert_blocked(reply(api, run, "leakword attempt"), {"audience": 1})
    later, _ = make_run(agent, destination, r)
    assert hit_ids(later, "leakword") == []
    assert not Message.objects.filter(content__contains="leakword").exists()


def test_a_reply_based_on_a_restricted_reply_in_its_prompt_inherits_its_restriction():
    """BUG (lineage leak through the prompt): the runtime loaded an earlier reply, itself based
    on a private source, into a run's recent history; the run answers without calling a tool.
    The new reply repeats what the earlier one said but carries no lineage, so once the
    source stops permitting the public room the earlier reply is withheld there and the new
    one is not. A reply's lineage should include the lineage of its prompt (current message
    and recent history), as "later searches and replies inherit the reply's lineage"."""
    workspace, agent, (r, b) = tenant(2)
    secret = room(workspace, "private", agent, r, b)
    said = post(secret, b, "secretword plan", created_at=at(1))
    public = room(workspace, "public", agent, r, b)
    first_run, first_api = make_run(agent, public, r)
    assert hit_ids(first_run, "secretword") == [said.id]
    first = delivered(first_api, first_run, "replyword the plan")

    question = post(public, r, "sample what was the plan again")
    second_run, second_api = make_run(agent, public, r, current=question, recent=(first,))
    second = delivered(second_api, second_run, "echoword the plan, repeated")

    make_account(workspace, "Newcomer Example")
    later, _ = make_run(agent, public, r)
    assert hit_ids(later, "replyword") == []
    assert hit_ids(later, "echoword") == []
    assert said.id in sources(second)
