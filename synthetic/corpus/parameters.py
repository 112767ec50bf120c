"""The corpus's sizes, shares, limits and time span: every number that shapes what it holds."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

VOCABULARY_SIZE = 25_000
# Word rank r is drawn with weight 1 / r**ZIPF_EXPONENT, conversation rank likewise.
ZIPF_EXPONENT = 1.0
CONVERSATION_SKEW = 1.0
ZIPF_TABLE_SIZE = 2**22
WORDS_PER_MESSAGE = (5, 40)
CORPUS_END = datetime(2026, 11, 1, tzinfo=UTC)
CORPUS_SPAN = timedelta(days=730)
# Message density grows over the two years: time = span * x**GROWTH for x uniform in [0, 1).
GROWTH = 0.8
BUSY_AGENT_NAME = "Corpus busy agent"
BUSY_AGENT_CONVERSATIONS = 200
DELETED_SHARE = 0.02
EDITED_SHARE = 0.01
REPLY_SHARE = 0.08
THREAD_SHARE = 0.05
LINEAGE_SHARE = 0.25
# Chance that a reply also builds on one of its agent's earlier lineage-bearing replies. Below
# 1/2 the closures stay small (expected size: direct sources / (1 - this)).
LINEAGE_CHAIN_SHARE = 0.25
FIRST_CHUNK = 5_000
DEFAULT_CHUNK = 50_000
MAX_MESSAGES = 20_000_000
MAX_WORKSPACES = 1_000
MAX_CONVERSATIONS = 1_000_000
MAX_WORKERS = 8
DEFAULT_WORKERS = 2
# Within one workspace, conversation k has kind KIND_CYCLE[k % 20]: every kind is present as
# soon as a workspace has four conversations.
KIND_CYCLE = (
    ("public", "private", "direct", "unknown")
    + ("public", "private", "direct", "private", "direct") * 3
    + ("unknown",)
)
MIN_CONVERSATIONS_PER_WORKSPACE = 4


class CorpusError(ValueError):
    """Arguments the corpus cannot be built from, worded for the person at the terminal."""


def workspace_slug(seed: int, index: int) -> str:
    """The slug of the corpus's ``index``-th workspace, so scripts find it without parsing."""
    return f"corpus-s{seed}-{index}"
