"""Long synthetic texts of the kinds people paste into a conversation: prose, camelCase code,
a Java stack trace and file paths, each of an exact length and the same for the same seed.

Storing a message builds its search document, whose identifier parts (docs/search.md,
"Identifiers") cost more than plain words; the benchmark (bench/identifier_indexing.py
--long) and the test that holds each kind within 3x prose of the same length use these texts.
"""

from __future__ import annotations

import random
from collections.abc import Callable

WORDS = [
    "account",
    "action",
    "agent",
    "answer",
    "archive",
    "audit",
    "batch",
    "branch",
    "budget",
    "buffer",
    "build",
    "cache",
    "call",
    "change",
    "channel",
    "check",
    "client",
    "cluster",
    "commit",
    "config",
    "connection",
    "context",
    "count",
    "cursor",
    "data",
    "deadline",
    "delivery",
    "deploy",
    "digest",
    "document",
    "draft",
    "edit",
    "entry",
    "error",
    "event",
    "export",
    "field",
    "file",
    "filter",
    "flag",
    "format",
    "frame",
    "group",
    "handler",
    "header",
    "history",
    "holder",
    "import",
    "index",
    "input",
    "item",
    "job",
    "key",
    "label",
    "layer",
    "limit",
    "line",
    "link",
    "list",
    "loader",
    "lock",
    "log",
    "manager",
    "member",
    "memory",
    "message",
    "meta",
    "migration",
    "mode",
    "model",
    "monitor",
    "name",
    "node",
    "notice",
    "number",
    "object",
    "offset",
    "option",
    "order",
    "output",
    "owner",
    "packet",
    "page",
    "panel",
    "parser",
    "partition",
    "path",
    "payload",
    "plan",
    "policy",
    "pool",
    "port",
    "process",
    "profile",
    "project",
    "query",
    "queue",
    "range",
    "reader",
    "record",
    "region",
    "reply",
    "report",
    "request",
    "resource",
    "result",
    "retry",
    "role",
    "room",
    "route",
    "rule",
    "run",
    "sample",
    "schema",
    "scope",
    "score",
    "search",
    "section",
    "sender",
    "server",
    "service",
    "session",
    "setting",
    "shard",
    "signal",
    "size",
    "slot",
    "source",
    "span",
    "state",
    "status",
    "step",
    "store",
    "stream",
    "summary",
    "table",
    "target",
    "task",
    "template",
    "tenant",
    "thread",
    "ticket",
    "timer",
    "token",
    "topic",
    "trace",
    "tracker",
    "update",
    "user",
    "value",
    "version",
    "view",
    "window",
    "worker",
    "workspace",
    "writer",
]

PROSE_WORDS = [
    "the",
    "a",
    "of",
    "to",
    "and",
    "in",
    "that",
    "we",
    "it",
    "for",
    "on",
    "with",
    "as",
    "was",
    "at",
    "by",
    "this",
    "but",
    "from",
    "they",
    "or",
    "had",
    "have",
    "not",
    "are",
    "be",
    "which",
    "one",
    "you",
    "all",
    "were",
    "when",
    "there",
    "can",
    "an",
    "our",
    "their",
    "more",
    "said",
    "been",
    "out",
    "so",
    "what",
    "up",
    "them",
    "some",
    "would",
    "could",
    "into",
    "after",
    "then",
    "than",
    "about",
    "other",
    "over",
    "only",
    "also",
    "just",
    "moved",
    "fixed",
    "looked",
    "asked",
    "found",
    "tried",
    "thought",
    "noticed",
    "checked",
    "changed",
    "meeting",
    "morning",
    "afternoon",
    "yesterday",
    "tomorrow",
    "because",
    "while",
    "before",
    "again",
    "still",
    "already",
]

KINDS = ("prose", "camelCase", "stack trace", "paths")

# Prose draws its words by Zipf's law from a vocabulary as varied as a long English text's:
# the function words first, then the words above, then made-up ones (a real text's rarer
# words), so 40,000 characters hold about as many distinct words as real prose does.
SYLLABLES = (
    "ba be bi bo ca co da de di do fa fe fi ga go la le li lo ma me mi mo na ne ni no pa pe "
)
SYLLABLES += "pi po ra re ri ro sa se si so ta te ti to va ve vi"


def _vocabulary() -> list[str]:
    rng = random.Random("vocabulary")
    syllables = SYLLABLES.split()
    made_up = {"".join(rng.choices(syllables, k=rng.randint(2, 4))) for _ in range(3000)}
    return PROSE_WORDS + WORDS + sorted(made_up - set(WORDS))


VOCABULARY = _vocabulary()
ZIPF_WEIGHTS = [1 / rank for rank in range(1, len(VOCABULARY) + 1)]


def _camel(rng: random.Random) -> str:
    parts = rng.sample(WORDS, rng.randint(2, 4))
    first = parts[0] if rng.random() < 0.5 else parts[0].capitalize()
    return first + "".join(part.capitalize() for part in parts[1:])


def _prose(rng: random.Random) -> str:
    return " ".join(rng.choices(VOCABULARY, weights=ZIPF_WEIGHTS, k=12)) + "."


# Code names its things again and again: a camelCase line draws its identifiers by Zipf's law
# from a pool as large as a big code base's, as prose draws its words (40,000 characters hold
# about 2,150 identifiers, 1,050 of them distinct).
IDENTIFIERS = [_camel(random.Random(f"identifier:{number}")) for number in range(20_000)]
IDENTIFIER_WEIGHTS = [1 / rank for rank in range(1, len(IDENTIFIERS) + 1)]


def _camel_line(rng: random.Random) -> str:
    return " ".join(rng.choices(IDENTIFIERS, weights=IDENTIFIER_WEIGHTS, k=6))


def _frame(rng: random.Random) -> str:
    package = ".".join(rng.sample(WORDS, 3))
    owner = _camel(rng).capitalize()
    method = _camel(rng)[0].lower() + _camel(rng)[1:]
    return f"\tat com.{package}.{owner}.{method}({owner}.java:{rng.randint(1, 4000)})"


def _path(rng: random.Random) -> str:
    folders = "/".join(rng.sample(WORDS, rng.randint(2, 5)))
    suffix = rng.choice((".py", ".java", ".ts", ".go", ".sql", ".md"))
    return f"/srv/{folders}/{rng.choice(WORDS)}_{rng.choice(WORDS)}{suffix}"


LINES: dict[str, Callable[[random.Random], str]] = {
    "prose": _prose,
    "camelCase": _camel_line,
    "stack trace": _frame,
    "paths": _path,
}


def long_text(kind: str, length: int, seed: int = 0) -> str:
    """``length`` characters of ``kind`` (one of ``KINDS``), lines joined as the kind joins
    them, cut at exactly ``length``."""
    rng = random.Random(f"{kind}:{seed}")
    separator = "\n" if kind == "stack trace" else " "
    pieces: list[str] = []
    total = 0
    while total < length:
        piece = LINES[kind](rng)
        pieces.append(piece)
        total += len(piece) + len(separator)
    return separator.join(pieces)[:length]
