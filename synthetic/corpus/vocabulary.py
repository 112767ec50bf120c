"""The corpus's synthetic words: English-like, never real, drawn with a Zipf distribution."""

from __future__ import annotations

import random

from synthetic.corpus.parameters import VOCABULARY_SIZE, ZIPF_EXPONENT, ZIPF_TABLE_SIZE

# Syllables of English-like synthetic words (no real vocabulary, so no real text).
_ONSETS = (
    *"bcdfgklmnprstvz",
    *("br", "cl", "dr", "fl", "gr", "pl", "pr", "sl", "sp", "st", "tr"),
)
_NUCLEI = (*"aeiou", "ai", "ea", "ee", "oo", "ou")
_CODAS = ("", "", "", "n", "r", "l", "s", "t", "m", "nd", "st", "rk")
# PostgreSQL's English stop words that this grammar can spell. Full-text search drops them,
# so they never enter the vocabulary.
_STOP_WORDS = frozenset(
    {"me", "be", "been", "do", "but", "for", "before", "to", "more", "most", "some", "no"}
    | {"nor", "not", "same", "so", "too", "can", "don"}
)


def corpus_vocabulary(seed: int) -> list[str]:
    """The corpus's words, most frequent first (rank r is drawn with weight 1/r).

    Seeded separately from everything else, so a benchmark can name rare, mid and common terms
    by rank whatever sizes the corpus was built with. Short words get the low ranks, as in
    English.
    """
    rng = random.Random(f"formation-corpus-vocabulary:{seed}")
    seen: set[str] = set()
    ranked: list[tuple[float, str]] = []
    while len(ranked) < VOCABULARY_SIZE:
        syllables = rng.choices((1, 2, 3, 4), weights=(2, 5, 3, 1))[0]
        word = "".join(
            rng.choice(_ONSETS) + rng.choice(_NUCLEI) + rng.choice(_CODAS) for _ in range(syllables)
        )
        if len(word) < 3 or word in _STOP_WORDS or word in seen:
            continue
        seen.add(word)
        ranked.append((syllables + 2 * rng.random(), word))
    ranked.sort()
    return [word for _, word in ranked]


def word_table(vocabulary: list[str]) -> list[str]:
    """Each word repeated in proportion to 1/rank**ZIPF_EXPONENT (at least once), so drawing
    a word is one uniform pick instead of a binary search over cumulative weights."""
    weights = [1.0 / rank**ZIPF_EXPONENT for rank in range(1, len(vocabulary) + 1)]
    scale = ZIPF_TABLE_SIZE / sum(weights)
    table: list[str] = []
    for word, weight in zip(vocabulary, weights, strict=True):
        table += [word] * max(1, round(weight * scale))
    return table
