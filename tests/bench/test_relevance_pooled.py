"""The busy-agent benchmark (``bench/relevance.py --pooled``): every conversation in one
workspace, one agent a member of them all, each turn known by its conversation and its dia_id.

The conversations here are written for this test (two of them share a speaker's first name and
every dia_id, as LoCoMo's samples do); the last test runs the benchmark on the project's own
synthetic set (``relevance_set.json``), never on LoCoMo.
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bench import relevance_core
from bench.relevance_core import Question, Ranking, Sample, Turn
from messages_app.models import Account, ConversationKind, Membership, Message

DATA = Path(__file__).with_name("relevance_set.json")
STARTED = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)


def sample(sample_id: str, speakers: tuple[str, str], texts: list[str], question: Question):
    turns = tuple(
        Turn(f"D1:{number}", speakers[number % 2 == 0], text, STARTED.replace(second=number))
        for number, text in enumerate(texts, 1)
    )
    return Sample(sample_id, *speakers, turns, (question,))


LIGHTHOUSE = Question("Who painted the lighthouse?", 4, frozenset({"D1:2"}))
ALPHA = sample(
    "alpha",
    ("John", "Priya"),
    ["Morning! Back from the coast.", "I painted the lighthouse blue.", "Bold choice."],
    LIGHTHOUSE,
)
BETA = sample(
    "beta",
    ("John", "Wen"),
    ["Did you see the harbour?", "Someone painted the lighthouse again.", "It looks new."],
    Question("What did Wen see?", 4, frozenset({"D1:2"})),
)


@pytest.mark.django_db
def test_pooled_load_is_one_agent_in_every_private_conversation():
    pool = relevance_core.pooled_load([ALPHA, BETA], run_tag=secrets.token_hex(3))

    alpha, beta = pool["alpha"], pool["beta"]
    assert alpha.workspace_id == beta.workspace_id
    assert alpha.agent_id == beta.agent_id
    assert alpha.conversation_id != beta.conversation_id
    # Two Johns, two people: every sample's speakers are accounts of their own.
    johns = Account.objects.filter(workspace_id=alpha.workspace_id, display_name="John")
    assert johns.count() == 2
    assert {alpha.requester_id, beta.requester_id} == set(johns.values_list("id", flat=True))
    for loaded, other in ((alpha, beta), (beta, alpha)):
        members = Membership.objects.filter(conversation_id=loaded.conversation_id)
        assert members.get(agent_id__isnull=False).agent_id == loaded.agent_id
        accounts = set(
            members.filter(account_id__isnull=False).values_list("account_id", flat=True)
        )
        assert len(accounts) == 2
        assert loaded.requester_id in accounts
        assert other.requester_id not in accounts
        assert members.get(account_id=loaded.requester_id).conversation.kind == (
            ConversationKind.PRIVATE
        )
    # Every message of the workspace is its (sample, dia_id), the same map for every sample.
    assert alpha.dia_ids is beta.dia_ids
    messages = Message.objects.filter(workspace_id=alpha.workspace_id)
    assert {
        alpha.dia_ids[m.id] for m in messages.filter(conversation_id=alpha.conversation_id)
    } == {
        ("alpha", "D1:1"),
        ("alpha", "D1:2"),
        ("alpha", "D1:3"),
    }
    assert len(set(alpha.dia_ids.values())) == messages.count() == 6


@pytest.mark.django_db
@pytest.mark.parametrize("kind", [ConversationKind.PRIVATE, ConversationKind.PUBLIC])
def test_pooled_search_history_sees_other_conversations_only_where_they_are_eligible(kind):
    pool = relevance_core.pooled_load([ALPHA, BETA], run_tag=secrets.token_hex(3), kind=kind)

    ranking = relevance_core.search_history_ranking(pool["alpha"], LIGHTHOUSE)

    assert ranking.ranked[0] == ("alpha", "D1:2")
    # Private, the other John's conversation is not for Priya's ears (SPEC §3, rule 3);
    # public, its turn about the lighthouse competes.
    assert (("beta", "D1:2") in ranking.ranked) == (kind == ConversationKind.PUBLIC)


def test_pooled_scores_count_only_the_questions_own_conversation():
    ranking = Ranking([("beta", "D1:2"), ("alpha", "D1:2")], {("beta", "D1:2")}, 1.0)

    pooled = relevance_core.score(LIGHTHOUSE, ranking, "alpha", pooled=True)

    assert pooled.sample == "alpha"
    assert pooled.reciprocal_rank == 0.5
    assert pooled.recall[8] == 1.0
    assert pooled.context_recall == 0.0
    assert pooled.other == 0.5
    assert relevance_core.score(LIGHTHOUSE, Ranking(["D1:2"], set(), 1.0), "alpha").other is None


def test_the_pooled_baseline_ranks_every_conversation_and_keeps_neighbours_in_their_own():
    index = relevance_core.Fts5Index.pooled([ALPHA, BETA])
    try:
        both = index.ranking(LIGHTHOUSE)
        last = index.ranking(Question("a bold choice", 4, frozenset({"D1:3"})))
    finally:
        index.close()

    assert set(both.ranked[:2]) == {("alpha", "D1:2"), ("beta", "D1:2")}
    # alpha's last turn is followed by beta's first in the index, but is not its neighbour.
    assert last.ranked == [("alpha", "D1:3")]
    assert last.context == {("alpha", "D1:1"), ("alpha", "D1:2"), ("alpha", "D1:3")}


@pytest.mark.django_db
def test_pooled_private_conversations_rank_as_unpooled_and_report_each_conversation():
    samples = relevance_core.read_samples(DATA)

    alone = relevance_core.run_benchmark(samples)
    pooled = relevance_core.run_benchmark(samples, pooled=True)

    ids = [s.sample_id for s in samples]
    assert alone.samples == pooled.samples == ids
    for report in (alone, pooled):
        per = report.per_conversation()
        assert set(per) == set(relevance_core.SYSTEMS)
        assert all(list(per[system]) == ids for system in per)
        table = relevance_core.per_conversation_table(report)
        assert all(f"| {sample_id} | search_history |" in table for sample_id in ids)
    # No other conversation's turn is eligible for a private one's run (SPEC §3, rule 3), and
    # a withheld message changes no hit or order: search_history's figures are unchanged.
    for a, b in zip(
        alone.scores[relevance_core.SEARCH_HISTORY],
        pooled.scores[relevance_core.SEARCH_HISTORY],
        strict=True,
    ):
        assert (a.sample, a.recall, a.hit, a.reciprocal_rank, a.context_recall) == (
            b.sample,
            b.recall,
            b.hit,
            b.reciprocal_rank,
            b.context_recall,
        )
        assert a.other is None
        assert b.other == 0.0
    figures = pooled.figures()
    assert figures[relevance_core.SEARCH_HISTORY]["overall"][relevance_core.OTHER] == 0.0
    assert figures[relevance_core.FTS5]["overall"][relevance_core.OTHER] > 0.0
