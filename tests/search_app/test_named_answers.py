"""A named participant's answer is found by the question before it (SPEC §6, docs/search.md).

A query that names a participant (an account's display name or an agent's name) finds that
participant's messages whose eligible neighbours hold the query's other words, even when the
message repeats none of them: "caroline pottery class" finds Caroline's "I loved it and made a
bowl" after Bob's "how was the pottery class". Nobody else's non-matching message is a hit, and
a query naming nobody finds only messages holding its words. The question must be one the run
may receive: a deleted, unobserved or lineage-withheld question finds nothing, exactly as if it
had never been written. All text is synthetic.
"""

from __future__ import annotations

import pytest

from messages_app import services
from search_app.history.ranking import WEIGHTS
from tests import factories
from tests.factories import at

pytestmark = pytest.mark.django_db

EARLY = at(-600)
NOW = at(60)
QUERY = "caroline pottery class"


def _world(question: str | None = "visible"):
    """The destination room and its people; ``question`` says how Bob's question is written:
    ``visible``, ``deleted``, ``unobserved`` (before the agent joined), ``derived`` (an agent's
    reply whose lineage withholds it), or not at all (None)."""
    workspace = factories.make_workspace()
    agent = factories.make_agent(workspace)
    alice = factories.make_account(workspace, "Alice Example")
    bob = factories.make_account(workspace, "Bob Example")
    caroline = factories.make_account(workspace, "Caroline Example")
    destination = factories.make_conversation(workspace, "private", "destination")
    for member in (agent, alice, bob, caroline):
        factories.join(destination, member, joined_at=EARLY)
    # Bob does not read it: it does not permit the destination, nor anything derived from it.
    elsewhere = factories.make_conversation(workspace, "private", "elsewhere")
    for member in (agent, alice, caroline):
        factories.join(elsewhere, member, joined_at=EARLY)
    source = factories.post(elsewhere, alice, "a private note", created_at=at(0))

    labels = {}

    def say(label, sender, text, minute, **extra):
        message = factories.post(destination, sender, text, created_at=at(minute), **extra)
        labels[message.id] = label
        return message

    say("opening", alice, "good morning everyone", 0.5)
    if question == "visible":
        say("question", bob, "how was the pottery class", 1)
    elif question == "deleted":
        services.message_delete(message=say("question", bob, "how was the pottery class", 1))
    elif question == "unobserved":
        say("question", bob, "how was the pottery class", -700)
    elif question == "derived":
        say("question", agent, "how was the pottery class", 1, lineage=[source.id])
    say("answer", caroline, "I loved it and made a bowl", 2)
    say("reply", bob, "nice, see you soon", 3)
    # Far enough that the later match is no neighbour of a neighbour of the answer.
    for minute in (10, 11, 12):
        say("filler", alice, "interlude", minute)
    say("later", alice, "the pottery class moves to friday", 30)
    run, _ = factories.make_run(agent, destination, alice)
    return run, labels


def _ranked(question: str | None, query: str = QUERY, **filters) -> dict[str, tuple]:
    """Each hit's label with its score and components, best first, in a world rolled back."""

    def search() -> dict[str, tuple]:
        run, labels = _world(question)
        result = factories.history(run, query, now=NOW, **filters)
        return {
            labels[hit.message.id]: (
                round(hit.score, 12),
                tuple((k, round(v, 12)) for k, v in sorted(hit.values.items())),
            )
            for hit in result.hits
        }

    return factories.rolled_back(search)


def test_a_named_participants_answer_is_found_by_the_question_before_it():
    run, labels = _world("visible")
    result = factories.history(run, QUERY, now=NOW)
    found = {labels[hit.message.id]: hit for hit in result.hits}

    assert set(found) == {"question", "answer", "later"}
    answer = found["answer"]
    assert answer.values["text"] == 0
    assert answer.values["speaker"] == 1
    assert answer.values["context"] > 0
    assert answer.score == pytest.approx(sum(answer.components.values()))
    assert answer.components["speaker"] == pytest.approx(WEIGHTS["speaker"])
    # Found by its neighbour's words: no highlight of its own, and its neighbours come along.
    assert "\ue000" not in (answer.marked or "")
    assert [labels[m.id] for m in answer.before] == ["opening", "question"]


def test_nobody_elses_message_is_found_by_its_neighbours_words():
    """Bob's reply sits next to the question too, but the query names Caroline, not Bob."""
    assert "reply" not in _ranked("visible")
    assert "opening" not in _ranked("visible")


def test_a_query_naming_nobody_finds_only_messages_holding_its_words():
    assert set(_ranked("visible", "pottery class")) == {"question", "later"}


@pytest.mark.parametrize("question", ["deleted", "unobserved", "derived"])
def test_a_withheld_question_finds_nothing_as_if_it_had_never_been_written(question):
    withheld = _ranked(question)

    assert "answer" not in withheld
    assert withheld == _ranked(None)
    assert "answer" in _ranked("visible")


@pytest.mark.parametrize(
    ("filters", "kept"),
    [
        ({"speaker": "requester"}, {"later"}),
        ({"before": at(1.5)}, {"question"}),
        ({"after": at(0.8)}, {"question", "answer", "later"}),
        ({"after": at(1.5)}, {"later"}),
    ],
)
def test_the_callers_filters_narrow_answers_like_any_hit(filters, kept):
    """A filter narrows the answers, and the questions that find them: an answer just inside
    ``after`` is not found by a question just outside it (docs/search.md)."""
    assert set(_ranked("visible", **filters)) == kept
