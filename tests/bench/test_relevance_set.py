"""search_history's relevance on conversations the project wrote itself, held to a floor per
ranking signal, so that ``make test`` catches a ranking regression with no data from outside.

``relevance_set.json`` beside this file holds four short conversations between two people, in
LoCoMo's format (docs/relevance.md), written for this test like every fixture here: their
turns, and questions with the turns that answer them. They go through the relevance
benchmark's own loading and asking (``bench/relevance_core.py``), one workspace each, speaker A
the requester. Each question is tagged with the part of the ranking it leans on:

- ``words``: the answer holds the question's words; the text signal alone finds it.
- ``context``: the answer holds one of them, and the turns before it (the question asked in the
  conversation) the others, while other turns hold that one word alone: the context signal.
- ``speaker``: the question names who said it, and the other speaker used the same words.
- ``named``: the question names who said it, and the answer repeats none of its words: a named
  participant's answer, found through its eligible neighbours.
- ``rarity``: the answer holds the question's rare word, a dozen other turns its common one
  (``garden`` in a garden's chat): BM25's rarity weights.

The floors are on the share of questions whose first answer turn is ranked first (hit@1) or in
the top three (hit@3), with a margin either way, so they hold through a change of the
statement that keeps the ranking and fail when a signal is lost. Measured when this set was
written, and with each signal switched off in ``search_app/history`` (temporarily):

| group | floor | today | context off | speaker weight 0 | named speakers off | rarity constant |
|---|---|--:|--:|--:|--:|--:|
| words (12) | hit@3 0.80 | 1.00 | 0.92 | 0.92 | 0.92 | 0.92 |
| context (20) | hit@3 0.70 | 0.95 | 0.40 | 0.95 | 0.95 | 0.85 |
| speaker and named (14) | hit@1 0.50 | 0.71 | 0.50 | 0.21 | 0.21 | 0.71 |
| rarity (9) | hit@1 0.60 | 0.89 | 1.00 | 0.89 | 0.89 | 0.33 |

("Named speakers off" is ``ranking.NAMED_SPEAKER`` as ``0``: no speaker score and no named
answers; "rarity constant" is every term's ``ln(1 + N / df)`` as 1.)
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import pytest

from bench import relevance_core

DATA = Path(__file__).with_name("relevance_set.json")
# Each group: the questions' tags, the figure and its floor.
FLOORS = {
    "words": (("words",), "hit@3", 0.80),
    "context": (("context",), "hit@3", 0.70),
    "speaker and named": (("speaker", "named"), "hit@1", 0.50),
    "rarity": (("rarity",), "hit@1", 0.60),
}

pytestmark = pytest.mark.django_db


def first_rank(ranking: relevance_core.Ranking, question: relevance_core.Question) -> int | None:
    """Where the first turn that answers ``question`` is ranked (1 is best), or None."""
    return next(
        (rank for rank, turn in enumerate(ranking.ranked, 1) if turn in question.evidence), None
    )


def ranks_by_tag() -> dict[str, list[int | None]]:
    """Every question asked through search_history, its first answer's rank by its tag."""
    tags = {
        (item["sample_id"], qa["question"]): qa["signal"]
        for item in json.loads(DATA.read_text())
        for qa in item["qa"]
    }
    run_tag = secrets.token_hex(3)
    ranks: dict[str, list[int | None]] = {}
    for sample in relevance_core.read_samples(DATA):
        loaded = relevance_core.sample_load(sample, run_tag=run_tag)
        for question in sample.questions:
            ranking = relevance_core.search_history_ranking(loaded, question)
            tag = tags[(sample.sample_id, question.text)]
            ranks.setdefault(tag, []).append(first_rank(ranking, question))
    return ranks


def hit_at(ranks: list[int | None], cutoff: int) -> float:
    return sum(1 for rank in ranks if rank is not None and rank <= cutoff) / len(ranks)


def test_the_set_is_what_the_floors_measure():
    items = json.loads(DATA.read_text())
    samples = relevance_core.read_samples(DATA)
    tags = [qa["signal"] for item in items for qa in item["qa"]]

    # Every question kept (each names turns that exist), and each group large enough that
    # one question is not the whole floor.
    assert sum(len(sample.questions) for sample in samples) == len(tags)
    known = {tag for group, _, _ in FLOORS.values() for tag in group}
    assert set(tags) == known
    for group, _, _ in FLOORS.values():
        assert sum(tag in group for tag in tags) >= 8, group


def test_search_history_keeps_its_floor_for_every_signal():
    ranks = ranks_by_tag()
    figures = {}
    for name, (tags, figure, floor) in FLOORS.items():
        grouped = [rank for tag in tags for rank in ranks[tag]]
        figures[name] = (figure, hit_at(grouped, int(figure.removeprefix("hit@"))), floor)
    report = "; ".join(
        f"{name} {figure} {value:.2f} (floor {floor:.2f})"
        for name, (figure, value, floor) in figures.items()
    )

    assert all(value >= floor for _, value, floor in figures.values()), report
    every = [rank for group in ranks.values() for rank in group]
    assert hit_at(every, 8) >= 0.90, report
