"""Corpus values as ``COPY`` text: times on the corpus's clock, NULL, and deterministic UUIDs."""

from __future__ import annotations

import random
from datetime import timedelta

from synthetic.corpus.parameters import CORPUS_END, CORPUS_SPAN

NULL = "\\N"
START = CORPUS_END - CORPUS_SPAN
# Corpus times are microseconds after START; SPAN_US is the end of the span.
SPAN_US = int(CORPUS_SPAN.total_seconds()) * 1_000_000
DAY_US = 86_400 * 1_000_000
# The end of a membership interval that never ends.
FOREVER = 2**62
_UUID_CLEAR = ~((0xF000 << 64) | (0xC000 << 48))
_UUID_V4 = (4 << 76) | (0x8000 << 48)
_UUID_V7 = (7 << 76) | (0x8000 << 48)
_START_MS = int(START.timestamp() * 1000)


def stamp(microseconds: int) -> str:
    """A corpus time (microseconds after the start of the span) as COPY text."""
    return (START + timedelta(microseconds=microseconds)).isoformat()


class Ids:
    """Deterministic UUIDs as text, from the corpus's random stream."""

    def __init__(self, rng: random.Random) -> None:
        self._bits = rng.getrandbits

    def __call__(self) -> str:
        """A version-4 (random) UUID."""
        return self._text((self._bits(128) & _UUID_CLEAR) | _UUID_V4)

    def timed(self, microseconds: int) -> str:
        """A version-7 UUID for a corpus time: the millisecond leads, random bits follow.

        Messages are written in time order, so their keys reach every unique index (and the
        search projection's) near its right edge instead of on a random page.
        """
        millis = _START_MS + microseconds // 1000
        return self._text((millis << 80) | (self._bits(80) & _UUID_CLEAR) | _UUID_V7)

    @staticmethod
    def _text(value: int) -> str:
        h = f"{value:032x}"
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
