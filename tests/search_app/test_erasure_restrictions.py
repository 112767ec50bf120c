"""Account erasure keeps what agents derived from the erased messages exactly as restricted as
before (SPEC §3 rule 4, §4; docs/lifecycle.md).

Bob writes in a private room {agent, Alice, Bob}. An agent reply in the workspace's public room
is based on it, and a run in the private room remembers it. Before the erasure the reply is
returned to runs in the private room and in Alice's direct room (both audiences are inside the
private room's) and withheld from the public room (Carol reads that one); the memory likewise.
After Bob's erasure the reply is returned and withheld in exactly the same places, marked
``sourcesErased``; the memory, like any memory whose source was deleted, is withheld
everywhere (deletion stays final), so it too is withheld wherever it was before.
"""

from __future__ import annotations

import pytest

from audit_app.lifecycle import Actor
from messages_app.lifecycle import erasure
from messages_app.models import Message
from search_app import services as search_services
from tests import factories
from tests.factories import at

pytestmark = pytest.mark.django_db

EARLY = at(-600)


def test_erasure_keeps_replies_and_memories_withheld_where_they_were(db):
    workspace = factories.make_workspace()
    agent = factories.make_agent(workspace)
    alice, bob, carol = (factories.make_account(workspace, name) for name in ("A", "B", "C"))
    private = factories.make_conversation(workspace, "private")
    public = factories.make_conversation(workspace, "public")
    direct = factories.make_conversation(workspace, "direct")
    for room, members in (
        (private, (agent, alice, bob)),
        (public, (agent, alice, bob, carol)),
        (direct, (agent, alice)),
    ):
        for member in members:
            factories.join(room, member, joined_at=EARLY)
    source = factories.post(private, bob, "sample quarterly plan", created_at=at(1))
    reply = factories.post(
        public, agent, "sample summary replyword", created_at=at(2), lineage=[source.id]
    )
    remembering, _ = factories.make_run(agent, private, alice)
    assert factories.hit_ids(remembering, "quarterly") == [source.id]
    memory = search_services.memory_create(
        workspace_id=workspace.id, run_id=remembering.id, content="memoword of the plan"
    )
    destinations = {
        "private": (private, alice),
        "direct": (direct, alice),
        "public": (public, carol),
    }

    def visible() -> tuple[set[str], set[str]]:
        replies, memories = set(), set()
        for name, (destination, requester) in destinations.items():
            run, _ = factories.make_run(agent, destination, requester)
            if factories.hit_ids(run, "replyword") == [reply.id]:
                replies.add(name)
            recalled = search_services.memory_search(
                workspace_id=workspace.id, run_id=run.id, query_text="memoword", limit=10
            )
            if [m.id for m in recalled] == [memory.id]:
                memories.add(name)
        return replies, memories

    replies_before, memories_before = visible()
    assert replies_before == memories_before == {"private", "direct"}

    report = erasure.account_erase(
        workspace_id=workspace.id, account_id=bob.id, actor=Actor(label="test")
    )

    replies_after, memories_after = visible()
    assert report.messages == 1
    assert replies_after == replies_before
    assert memories_after == set()
    reply = Message.objects.get(pk=reply.pk)
    assert reply.sources_erased
    assert reply.deleted_at is None
