"""The busy agent that kept talking (``bench/relevance.py --distractors N``): each question's
distractors are copies of the other conversations only, with fresh names in their text too,
newer (or older) than every conversation asked about, N messages in all.

Run on the project's own synthetic set (``relevance_set.json``, LoCoMo's format), never on
LoCoMo: the benchmark's leave-one-out path end to end in the test database, each case looked
at from inside its searcher, where its questions are asked.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench import relevance_core, relevance_distractors
from messages_app.models import Account, Conversation, ConversationKind, Membership, Message

DATA = Path(__file__).with_name("relevance_set.json")


class Inspecting(relevance_core.InProcess):
    """search_history in this process, noting what each case's workspace holds when its
    first question is asked."""

    def __init__(self) -> None:
        super().__init__(candidates=True)
        self.cases: dict[str, dict] = {}

    def ranking(self, loaded, question):
        conversation = Conversation.objects.get(id=loaded.conversation_id)
        if conversation.title not in self.cases:
            self.cases[conversation.title] = workspace_contents(loaded)
        return super().ranking(loaded, question)


def workspace_contents(loaded) -> dict:
    conversations = Conversation.objects.filter(workspace_id=loaded.workspace_id)
    copies = conversations.filter(title__contains="#")
    messages = Message.objects.filter(workspace_id=loaded.workspace_id)
    distractors = messages.filter(conversation__in=copies)
    originals = messages.exclude(conversation__in=copies)
    speakers = Account.objects.filter(
        id__in=Membership.objects.filter(conversation__in=copies).values("account_id")
    )
    return {
        "sources": {title.split("#")[0] for title in copies.values_list("title", flat=True)},
        "originals": set(
            conversations.exclude(title__contains="#").values_list("title", flat=True)
        ),
        "kinds": set(copies.values_list("kind", flat=True)),
        "agent_in_every_copy": all(
            Membership.objects.filter(conversation=c, agent_id=loaded.agent_id).exists()
            for c in copies
        ),
        "count": distractors.count(),
        "texts": list(distractors.values_list("content", flat=True)),
        "speakers": set(speakers.values_list("display_name", flat=True)),
        "distractor_times": [
            min(distractors.values_list("created_at", flat=True)),
            max(distractors.values_list("created_at", flat=True)),
        ],
        "original_times": [
            min(originals.values_list("created_at", flat=True)),
            max(originals.values_list("created_at", flat=True)),
        ],
    }


@pytest.mark.django_db
@pytest.mark.parametrize("when", ["newer", "older"])
def test_each_question_competes_with_copies_of_the_other_conversations_only(when):
    samples = relevance_core.read_samples(DATA)
    ids = [sample.sample_id for sample in samples]
    names = relevance_distractors.participants(samples)
    # More than the other three conversations hold, so they are copied more than once, and
    # not a whole number of copies, so the last is cut short.
    count = 200
    assert all(sum(len(o.turns) for o in samples if o is not s) < count for s in samples)
    searcher = Inspecting()

    report = relevance_core.run_benchmark(
        samples,
        pooled=True,
        kind=ConversationKind.PUBLIC,
        distractors=count,
        when=when,
        searcher=searcher,
    )

    assert report.samples == ids
    assert len(report.scores[relevance_core.SEARCH_HISTORY]) == sum(
        len(sample.questions) for sample in samples
    )
    assert set(searcher.cases) == set(ids)
    for sample_id, case in searcher.cases.items():
        # The pool is every conversation; the copies are of every other one, never its own.
        assert case["originals"] == set(ids)
        assert case["sources"] == set(ids) - {sample_id}
        assert case["count"] == count
        assert case["kinds"] == {ConversationKind.PUBLIC}
        assert case["agent_in_every_copy"]
        # Fresh names: no copy's speaker is, or names, a participant of the questions.
        assert case["speakers"]
        assert not case["speakers"] & names
        named = re.compile(r"\b(" + "|".join(names) + r")\b", re.IGNORECASE)
        assert not any(named.search(text) for text in case["texts"])
        assert any(speaker in text for speaker in case["speakers"] for text in case["texts"])
        first, last = case["original_times"]
        if when == "newer":
            assert case["distractor_times"][0] > last
        else:
            assert case["distractor_times"][1] < first
    # What the statement held is known for every question, and a turn it returned was held.
    for found in report.scores[relevance_core.SEARCH_HISTORY]:
        assert found.not_matched is not None
        assert found.not_ranked <= found.evidence * (1 - found.recall[20]) + 1e-9
    figures = report.figures()[relevance_core.SEARCH_HISTORY]["overall"]
    assert 0 <= figures["evidence_not_ranked"] < figures["evidence_turns"]
    # Distractors are other conversations' turns: the share of them in the top 8 counts.
    assert report.figures()[relevance_core.FTS5]["overall"][relevance_core.OTHER] > 0


def test_distractors_are_replicated_to_exactly_the_count_asked():
    samples = relevance_core.read_samples(DATA)
    asked, sources = samples, samples[1:]
    total = sum(len(source.turns) for source in sources)

    none = relevance_distractors.distractor_samples(sources, count=0, when="newer", asked=asked)
    copies = relevance_distractors.distractor_samples(
        sources, count=2 * total + 5, when="newer", asked=asked
    )

    assert none == []
    assert sum(len(copy.turns) for copy in copies) == 2 * total + 5
    assert [copy.sample_id.split("#")[0] for copy in copies] == [
        source.sample_id for source in sources
    ] * 2 + [sources[0].sample_id]
    assert len(copies[-1].turns) == 5
    assert all(copy.questions == () for copy in copies)
    # Two copies of one conversation are two pairs of people; a turn keeps its order.
    speakers = [(copy.speaker_a, copy.speaker_b) for copy in copies]
    assert len({name for pair in speakers for name in pair}) == 2 * len(copies)
    for copy in copies:
        times = [turn.created_at for turn in copy.turns]
        assert times == sorted(times)
        assert len(set(times)) == len(times)
