"""What search_history may not return never moves a score (SPEC §3, §6).

Two worlds are built the same way, the second with four more messages the run may not
receive, each where it would count if it leaked: a match in a room whose audience does not
permit the destination, written by an account whose name holds a query word (it would make
that word a named speaker's), and three between the destination's hits (a deleted one, one the
agent never observed, an agent's reply whose lineage withholds it), where they would be context
neighbours. Every hit's score, components and neighbours are the same in both. All text is
synthetic.
"""

from __future__ import annotations

import pytest

from messages_app import services
from tests import factories
from tests.factories import at

pytestmark = pytest.mark.django_db

QUERY = "migration report"
EARLY = at(-600)


def _ranked(with_withheld: bool) -> dict[str, tuple]:
    """Build one world, search it, roll it back: each hit's label with its score, components
    and neighbours' labels."""

    def build() -> dict[str, tuple]:
        workspace = factories.make_workspace()
        agent = factories.make_agent(workspace)
        alice = factories.make_account(workspace, "Alice Example")
        bob = factories.make_account(workspace, "Bob Example")
        zed = factories.make_account(workspace, "Zed Report")
        destination = factories.make_conversation(workspace, "private", "destination")
        for member in (agent, alice, bob):
            factories.join(destination, member, joined_at=EARLY)
        # Zed and Alice read it, Bob does not: it does not permit the destination.
        elsewhere = factories.make_conversation(workspace, "private", "elsewhere")
        for member in (agent, alice, zed):
            factories.join(elsewhere, member, joined_at=EARLY)

        labels = {}

        def say(label, room, sender, text, minute, **extra):
            message = factories.post(room, sender, text, created_at=at(minute), **extra)
            labels[message.id] = label
            return message

        if with_withheld:
            source = say("elsewhere", elsewhere, zed, "migration report for zed", 1)
        say("plan", destination, alice, "the migration plan", 2)
        if with_withheld:
            deleted = say("deleted", destination, bob, "report on the migration", 3)
            services.message_delete(message=deleted)
            say("unobserved", destination, bob, "migration report migration", -700)
        say("filler", destination, bob, "sounds good to me", 4)
        if with_withheld:
            say("derived", destination, agent, "report migration", 5, lineage=[source.id])
        say("draft", destination, bob, "a report draft", 6)
        say("closing", destination, alice, "thanks all", 7)

        run, _ = factories.make_run(agent, destination, alice)
        result = factories.history(run, QUERY, now=at(60))
        return {
            labels[hit.message.id]: (
                round(hit.score, 12),
                tuple((k, round(v, 12)) for k, v in sorted(hit.components.items())),
                [labels[m.id] for m in (*hit.before, *hit.after)],
            )
            for hit in result.hits
        }

    return factories.rolled_back(build)


def test_withheld_matches_neighbours_and_speakers_change_no_score():
    plain = _ranked(with_withheld=False)
    withheld = _ranked(with_withheld=True)

    assert set(plain) == {"plan", "draft"}
    assert withheld == plain
    # The context and the rarity were really in play: both hits take words from around them.
    components = {label: dict(values[1]) for label, values in plain.items()}
    assert all(parts["text"] > 0 for parts in components.values())
    assert components["draft"]["speaker"] == components["plan"]["speaker"] == 0
