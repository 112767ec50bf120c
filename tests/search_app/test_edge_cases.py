"""Edge cases found in review: each pins a failure that once reached a user."""

from __future__ import annotations

from messages_app import services
from messages_app.models import RunEvidence
from messages_app.services import MessageDraft
from tests import factories
from tests.factories import at

public_room = factories.observed_public_room


def test_a_text_holding_every_bmp_private_use_character_still_highlights(db):
    """Highlight markers are private-use characters; one message holding all 6,400 of the BMP
    ones once made every search that hit it fail with 500, after charging the budget."""
    _, agent, alice, room = public_room()
    every_marker = "".join(chr(code) for code in range(0xE000, 0xF900))
    hit = factories.post(room, alice, f"migration {every_marker} migration", created_at=at(1))
    run, client = factories.make_run(agent, room, alice)

    response = client.post("/api/v1/history/search", {"query": "migration"}, format="json")

    assert response.status_code == 200
    (item,) = response.json()["items"]
    assert item["id"] == str(hit.id)
    assert item["highlights"] == [[0, 9], [11 + len(every_marker), 9]]
    assert set(RunEvidence.objects.filter(run=run).values_list("message_id", flat=True)) == {hit.id}


def test_a_failing_search_records_no_evidence(db, monkeypatch):
    """Evidence is written in the search's transaction: a failure after ranking (here, while
    highlighting) leaves the run's budget untouched."""
    _, agent, alice, room = public_room()
    factories.post(room, alice, "migration notes", created_at=at(1))
    run, client = factories.make_run(agent, room, alice)

    def broken(*args, **kwargs):
        raise RuntimeError("highlighting failed")

    monkeypatch.setattr("search_app.services.highlights", broken)
    client.raise_request_exception = False
    response = client.post("/api/v1/history/search", {"query": "migration"}, format="json")

    assert response.status_code == 500
    assert response.json()["error"]["code"] == "internal_error"
    assert not RunEvidence.objects.filter(run=run).exists()


def test_text_value_stays_within_one_past_the_last_stored_position(db):
    """PostgreSQL stores every word past position 16,383 at 16,383, so two different terms
    there share a position; closeness must treat that as adjacent, not closer."""
    _, agent, alice, room = public_room()
    factories.post(room, alice, "filler " * 16_400 + "alpha bravo", created_at=at(1))
    run, _ = factories.make_run(agent, room, alice)

    (hit,) = factories.history(run, "alpha bravo").hits

    assert hit.values["text"] <= 1.0
    assert hit.components["text"] <= 0.6


def test_direct_source_with_two_human_readers_is_not_direct_continuity(db):
    """SPEC §3: a direct source qualifies through "S's one human reader". A direct room with two
    humans, each linked to the destination's reader, is not a direct conversation of theirs."""
    workspace = factories.make_workspace()
    agent = factories.make_agent(workspace)
    alice = factories.make_account(workspace, "Alice Example")
    alias_one = factories.make_account(workspace, "Alice elsewhere")
    alias_two = factories.make_account(workspace, "Alice third")
    for alias in (alias_one, alias_two):
        link = services.identity_link_create(
            workspace_id=workspace.id, account_id=alice.id, linked_account_id=alias.id
        )
        services.identity_link_verify(link=link)
    destination = factories.make_conversation(workspace, "direct", "alice-dm")
    shared = factories.make_conversation(workspace, "direct", "two-humans")
    single = factories.make_conversation(workspace, "direct", "alias-dm")
    for room in (destination, shared, single):
        factories.join(room, agent, joined_at=at(-600))
    factories.join(destination, alice, joined_at=at(-600))
    factories.join(shared, alias_one, joined_at=at(-600))
    factories.join(shared, alias_two, joined_at=at(-600))
    factories.join(single, alias_one, joined_at=at(-600))
    withheld = factories.post(shared, alias_one, "sample two readers", created_at=at(1))
    allowed = factories.post(single, alias_one, "sample one reader", created_at=at(2))
    run, _ = factories.make_run(agent, destination, alice)

    assert set(factories.hit_ids(run)) == {allowed.id}
    assert withheld.id not in set(factories.hit_ids(run))


def test_neighbours_are_found_past_a_long_stretch_of_deleted_messages(db):
    """Neighbours are the nearest *eligible* messages: thirty deleted ones in between do not
    hide the two before them."""
    _, agent, alice, room = public_room()
    drafts = [
        MessageDraft(content=f"context {i}", sender_account_id=alice.id, created_at=at(i))
        for i in range(32)
    ]
    context = services.messages_create(conversation=room, drafts=drafts)
    for message in context[2:]:
        services.message_delete(message=message)
    hit = factories.post(room, alice, "anchorword", created_at=at(40))
    run, _ = factories.make_run(agent, room, alice)

    (found,) = factories.history(run, "anchorword").hits

    assert found.message.id == hit.id
    assert [m.id for m in found.before] == [context[0].id, context[1].id]


def test_highlights_survive_a_word_too_long_to_index(db):
    """PostgreSQL leaves words over 2,047 bytes out of ts_headline's output; offsets after one
    must still point at the matched word in the original text."""
    _, agent, alice, room = public_room()
    blob = "x" * 3_000
    text = f"before {blob} migration after"
    factories.post(room, alice, text, created_at=at(1))
    run, _ = factories.make_run(agent, room, alice)

    result = factories.history(run, "migration")

    (spans,) = result.highlights
    assert spans == [[text.index("migration"), len("migration")]]
