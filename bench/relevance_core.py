"""The relevance benchmark's core: LoCoMo conversations loaded through the services, each
answerable question asked through search_history, beside SQLite FTS5 BM25 over the same turns.

It uses Django's current database connection and writes to it (a workspace per conversation,
a run per question), so ``bench/relevance.py`` calls it on a database of its own and
``tests/bench/test_relevance.py`` inside the test database. The data is read from its path and
never stored anywhere but in that database (CC BY-NC 4.0, ``docs/relevance.md``).
"""

from __future__ import annotations

import json
import math
import re
import secrets
import sqlite3
import statistics
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TypeVar

from formation.errors import InvalidArguments
from messages_app.limits import MAX_BULK_MESSAGES
from messages_app.models import ConversationKind
from messages_app.services import (
    MessageDraft,
    account_create,
    agent_create,
    conversation_create,
    membership_join,
    messages_create,
    workspace_create,
)
from search_app.history.results import HistoryFilters, HistorySearch
from search_app.runs.services import run_create
from search_app.services import search_history

# LoCoMo's categories with their answer in the conversation; 5 (adversarial) has none.
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
SESSION = re.compile(r"session_(\d+)")
SESSION_DATE_FORMAT = "%I:%M %p on %d %B, %Y"
# Turns of a session are this far apart, so their times keep the order they were said in.
TURN_SPACING = timedelta(seconds=10)
# search_history's largest limit (SPEC §5): one call answers both cut-offs.
LIMIT = 20
CUTOFFS = (8, 20)
# The cut-off whose hits, with their neighbours, are the context an agent would read.
CONTEXT_CUTOFF = 8
# The baseline's neighbours: as search_history's, up to two turns each side.
NEIGHBOURS = 2
SEARCH_HISTORY = "search_history"
FTS5 = "fts5_bm25"
SYSTEMS = {SEARCH_HISTORY: "search_history", FTS5: "SQLite FTS5 BM25"}
WORD = re.compile(r"[^\W_]+")
T = TypeVar("T")


@dataclass(frozen=True)
class Turn:
    dia_id: str
    speaker: str
    text: str
    created_at: datetime


@dataclass(frozen=True)
class Question:
    text: str
    category: int
    evidence: frozenset[str]


@dataclass(frozen=True)
class Sample:
    """One LoCoMo conversation: its two speakers, its turns in order, its answerable questions."""

    sample_id: str
    speaker_a: str
    speaker_b: str
    turns: tuple[Turn, ...]
    questions: tuple[Question, ...]


def turn_text(turn: dict) -> str:
    """A turn as a chat client would store it: a shared photo's caption is its alt text."""
    caption = turn.get("blip_caption")
    return f"{turn['text']} [shares a photo: {caption}]" if caption else turn["text"]


def _sample(item: dict) -> Sample:
    talk = item["conversation"]
    sessions = sorted(
        int(match.group(1)) for key in talk if (match := SESSION.fullmatch(key)) and talk[key]
    )
    turns = []
    for number in sessions:
        started = datetime.strptime(
            talk[f"session_{number}_date_time"], SESSION_DATE_FORMAT
        ).replace(tzinfo=UTC)
        turns += [
            Turn(turn["dia_id"], turn["speaker"], turn_text(turn), started + index * TURN_SPACING)
            for index, turn in enumerate(talk[f"session_{number}"])
        ]
    known = {turn.dia_id for turn in turns}
    questions = []
    for qa in item["qa"]:
        # A few evidence ids are typos that name no turn: they are left out, and a question
        # left with no evidence at all is skipped.
        evidence = frozenset(qa.get("evidence", ())) & known
        if qa["category"] in CATEGORIES and evidence:
            questions.append(Question(qa["question"], qa["category"], evidence))
    return Sample(
        item["sample_id"], talk["speaker_a"], talk["speaker_b"], tuple(turns), tuple(questions)
    )


def read_samples(
    path: Path, *, sample_ids: Iterable[str] = (), count: int | None = None
) -> list[Sample]:
    """The conversations of a LoCoMo-format file: those named, else the first ``count``."""
    items = json.loads(Path(path).read_text())
    wanted = set(sample_ids)
    if wanted:
        items = [item for item in items if item["sample_id"] in wanted]
        missing = wanted - {item["sample_id"] for item in items}
        if missing:
            raise ValueError(f"No such sample in {path}: {', '.join(sorted(missing))}")
    return [_sample(item) for item in items[:count]]


@dataclass(frozen=True)
class Loaded:
    """A sample stored in a workspace of its own, and which turn each message is."""

    workspace_id: uuid.UUID
    agent_id: uuid.UUID
    conversation_id: uuid.UUID
    requester_id: uuid.UUID
    dia_ids: dict[uuid.UUID, str]


def sample_load(sample: Sample, *, run_tag: str) -> Loaded:
    """Store a sample as the runtime would: two accounts named as the speakers, and one
    ``private`` conversation they and an agent joined before its first turn, holding every
    session's turns in order at the session's time. Private with all three as members lets a
    run there, for either speaker, receive every turn (SPEC §3, rule 3)."""
    workspace = workspace_create(slug=f"locomo-{sample.sample_id}-{run_tag}")
    accounts = {
        name: account_create(workspace_id=workspace.id, display_name=name)
        for name in (sample.speaker_a, sample.speaker_b)
    }
    agent = agent_create(workspace_id=workspace.id, name="LoCoMo agent")
    conversation = conversation_create(
        workspace_id=workspace.id, kind=ConversationKind.PRIVATE, title=sample.sample_id
    )
    joined_at = sample.turns[0].created_at - timedelta(minutes=1)
    membership_join(conversation=conversation, agent_id=agent.id, joined_at=joined_at)
    for account in accounts.values():
        membership_join(conversation=conversation, account_id=account.id, joined_at=joined_at)
    dia_ids: dict[uuid.UUID, str] = {}
    for start in range(0, len(sample.turns), MAX_BULK_MESSAGES):
        batch = sample.turns[start : start + MAX_BULK_MESSAGES]
        messages = messages_create(
            conversation=conversation,
            drafts=[
                MessageDraft(
                    content=turn.text,
                    sender_account_id=accounts[turn.speaker].id,
                    created_at=turn.created_at,
                )
                for turn in batch
            ],
        )
        dia_ids.update(
            (message.id, turn.dia_id) for message, turn in zip(messages, batch, strict=True)
        )
    return Loaded(
        workspace_id=workspace.id,
        agent_id=agent.id,
        conversation_id=conversation.id,
        requester_id=accounts[sample.speaker_a].id,
        dia_ids=dia_ids,
    )


@dataclass
class Ranking:
    """One question's answer: the turns ranked best first, the context of the first
    ``CONTEXT_CUTOFF`` (those hits and their neighbours), and the call's milliseconds."""

    ranked: list[str]
    context: set[str]
    milliseconds: float


def _timed(call: Callable[[], T]) -> tuple[T, float]:
    started = time.perf_counter()
    answer = call()
    return answer, (time.perf_counter() - started) * 1000


def search_history_ranking(loaded: Loaded, question: Question) -> Ranking:
    """Ask through search_history from a fresh run of the agent, for speaker A in the
    conversation; a query with no searchable word (``invalid_arguments``) finds nothing."""
    run, _ = run_create(
        workspace_id=loaded.workspace_id,
        agent_id=loaded.agent_id,
        conversation_id=loaded.conversation_id,
        requester_id=loaded.requester_id,
    )

    def call() -> HistorySearch | None:
        try:
            return search_history(
                workspace_id=loaded.workspace_id,
                run_id=run.id,
                query_text=question.text,
                filters=HistoryFilters(),
                limit=LIMIT,
            )
        except InvalidArguments:
            return None

    found, milliseconds = _timed(call)
    if found is None:
        return Ranking([], set(), milliseconds)
    ranked = [loaded.dia_ids[hit.message.id] for hit in found.hits]
    context = {
        loaded.dia_ids[message.id]
        for hit in found.hits[:CONTEXT_CUTOFF]
        for message in (hit.message, *hit.before, *hit.after)
    }
    return Ranking(ranked, context, milliseconds)


class Fts5Index:
    """The baseline: SQLite FTS5 (porter stemming over unicode61) over one sample's turns,
    in memory, its question words each quoted and OR-ed, ranked by ``bm25()``."""

    def __init__(self, sample: Sample) -> None:
        self.turns = [turn.dia_id for turn in sample.turns]
        self.db = sqlite3.connect(":memory:")
        self.db.execute("CREATE VIRTUAL TABLE turns USING fts5(body, tokenize='porter unicode61')")
        self.db.executemany(
            "INSERT INTO turns (rowid, body) VALUES (?, ?)",
            [(position, turn.text) for position, turn in enumerate(sample.turns)],
        )

    def ranking(self, question: Question) -> Ranking:
        words = dict.fromkeys(word.lower() for word in WORD.findall(question.text))
        expression = " OR ".join(f'"{word}"' for word in words)

        def call() -> list[tuple[int]]:
            if not expression:
                return []
            return self.db.execute(
                "SELECT rowid FROM turns WHERE turns MATCH ? ORDER BY bm25(turns), rowid LIMIT ?",
                (expression, LIMIT),
            ).fetchall()

        rows, milliseconds = _timed(call)
        positions = [position for (position,) in rows]
        context = {
            self.turns[near]
            for position in positions[:CONTEXT_CUTOFF]
            for near in range(position - NEIGHBOURS, position + NEIGHBOURS + 1)
            if 0 <= near < len(self.turns)
        }
        return Ranking([self.turns[position] for position in positions], context, milliseconds)

    def close(self) -> None:
        self.db.close()


@dataclass(frozen=True)
class Score:
    """One question's figures for one system."""

    category: int
    recall: dict[int, float]
    hit: dict[int, float]
    reciprocal_rank: float
    context_recall: float
    milliseconds: float


def score(question: Question, ranking: Ranking) -> Score:
    evidence = question.evidence
    first = next((rank for rank, turn in enumerate(ranking.ranked, 1) if turn in evidence), None)
    return Score(
        category=question.category,
        recall={k: len(evidence.intersection(ranking.ranked[:k])) / len(evidence) for k in CUTOFFS},
        hit={k: float(bool(evidence.intersection(ranking.ranked[:k]))) for k in CUTOFFS},
        reciprocal_rank=1 / first if first else 0.0,
        context_recall=len(evidence & ranking.context) / len(evidence),
        milliseconds=ranking.milliseconds,
    )


def percentile(values: Sequence[float], share: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def summary(scores: Sequence[Score]) -> dict[str, float]:
    """The averages over questions, and the latency percentiles, of a group of scores."""
    if not scores:
        return {"n": 0}
    figures: dict[str, float] = {"n": len(scores)}
    for k in CUTOFFS:
        figures[f"recall@{k}"] = statistics.fmean(s.recall[k] for s in scores)
    for k in CUTOFFS:
        figures[f"hit@{k}"] = statistics.fmean(s.hit[k] for s in scores)
    figures["mrr"] = statistics.fmean(s.reciprocal_rank for s in scores)
    figures[f"recall@{CONTEXT_CUTOFF}+neighbours"] = statistics.fmean(
        s.context_recall for s in scores
    )
    milliseconds = [s.milliseconds for s in scores]
    figures["p50_ms"] = percentile(milliseconds, 0.50)
    figures["p95_ms"] = percentile(milliseconds, 0.95)
    return figures


@dataclass
class Report:
    """Every question's scores by system, and the figures per category and overall."""

    samples: list[str] = field(default_factory=list)
    turns: int = 0
    scores: dict[str, list[Score]] = field(default_factory=lambda: {s: [] for s in SYSTEMS})

    def figures(self) -> dict[str, dict[str, dict[str, float]]]:
        """``{system: {"overall" | category name: {metric: value}}}``."""
        table: dict[str, dict[str, dict[str, float]]] = {}
        for system, scores in self.scores.items():
            table[system] = {"overall": summary(scores)}
            for number, name in CATEGORIES.items():
                table[system][name] = summary([s for s in scores if s.category == number])
        return table


def run_benchmark(
    samples: Sequence[Sample],
    *,
    limit: int | None = None,
    progress: Callable[[str], None] = lambda line: None,
) -> Report:
    """Load each sample into a fresh workspace and ask its questions (the first ``limit`` of
    each, if given) of both systems, question by question, so both see the same machine."""
    report = Report()
    run_tag = secrets.token_hex(3)
    for sample in samples:
        loaded = sample_load(sample, run_tag=run_tag)
        baseline = Fts5Index(sample)
        questions = sample.questions[:limit]
        for question in questions:
            report.scores[SEARCH_HISTORY].append(
                score(question, search_history_ranking(loaded, question))
            )
            report.scores[FTS5].append(score(question, baseline.ranking(question)))
        baseline.close()
        report.samples.append(sample.sample_id)
        report.turns += len(sample.turns)
        progress(f"{sample.sample_id}: {len(sample.turns)} turns, {len(questions)} questions")
    return report


COLUMNS = (
    ("n", "n", "{:.0f}"),
    ("recall@8", "R@8", "{:.3f}"),
    ("recall@20", "R@20", "{:.3f}"),
    ("hit@8", "hit@8", "{:.3f}"),
    ("hit@20", "hit@20", "{:.3f}"),
    ("mrr", "MRR", "{:.3f}"),
    (f"recall@{CONTEXT_CUTOFF}+neighbours", "R@8 hits+nbrs", "{:.3f}"),
    ("p50_ms", "p50 ms", "{:.1f}"),
    ("p95_ms", "p95 ms", "{:.1f}"),
)


def markdown_table(report: Report) -> str:
    """Both systems side by side, overall then per category, as a Markdown table."""
    figures = report.figures()
    lines = [
        "| questions | system | " + " | ".join(title for _, title, _ in COLUMNS) + " |",
        "|---|---|" + "--:|" * len(COLUMNS),
    ]
    for group in ("overall", *CATEGORIES.values()):
        for system, name in SYSTEMS.items():
            row = figures[system][group]
            cells = [fmt.format(row[key]) if key in row else "-" for key, _, fmt in COLUMNS]
            lines.append(f"| {group} | {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
