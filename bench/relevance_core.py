"""The relevance benchmark's core: LoCoMo conversations loaded through the services, each
answerable question asked through search_history, beside SQLite FTS5 BM25 over the same turns.

Two ways to load them: a workspace and an agent per conversation (``sample_load``, the default),
or all of them pooled (``pooled_load``): one workspace and one busy agent that is a member of
every conversation, each question asked of it in its own conversation, with the baseline
indexing every conversation's turns together. Pooled, a turn is known by its sample and its
dia_id (every sample has a "D1:3").

It uses Django's current database connection and writes to it (a workspace per conversation,
or one for them all, and a run per question), so ``bench/relevance.py`` calls it on a database
of its own and ``tests/bench/test_relevance.py`` inside the test database. The data is read
from its path and never stored anywhere but in that database (CC BY-NC 4.0,
``docs/relevance.md``).
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
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Protocol, TypeVar

from formation.errors import InvalidArguments
from messages_app.limits import MAX_BULK_MESSAGES
from messages_app.models import Account, ConversationKind
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
# Pooled, the share of the top hits that are another conversation's turns.
OTHER = f"other_conversation@{CONTEXT_CUTOFF}"
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
    """A sample stored in a workspace, the agent and the speaker A its questions are asked
    for, and which turn each message of the workspace is: its dia_id, or pooled its
    ``(sample_id, dia_id)``."""

    workspace_id: uuid.UUID
    agent_id: uuid.UUID
    conversation_id: uuid.UUID
    requester_id: uuid.UUID
    dia_ids: Mapping[uuid.UUID, Hashable]


def _speakers_create(workspace_id: uuid.UUID, sample: Sample) -> dict[str, Account]:
    """The sample's two speakers as accounts named as they are, new ones for every sample."""
    return {
        name: account_create(workspace_id=workspace_id, display_name=name)
        for name in (sample.speaker_a, sample.speaker_b)
    }


def _conversation_load(
    sample: Sample,
    *,
    workspace_id: uuid.UUID,
    agent_id: uuid.UUID,
    accounts: Mapping[str, Account],
    dia_ids: dict[uuid.UUID, Hashable],
    key: Callable[[str], Hashable],
    kind: str = ConversationKind.PRIVATE,
) -> uuid.UUID:
    """The sample's ``private`` (or ``kind``) conversation, which its speakers and the agent
    joined a minute before its first turn, holding every session's turns in order at the
    session's time; each message's turn, as ``key`` of its dia_id, into ``dia_ids``. Returns
    the conversation."""
    conversation = conversation_create(workspace_id=workspace_id, kind=kind, title=sample.sample_id)
    joined_at = sample.turns[0].created_at - timedelta(minutes=1)
    membership_join(conversation=conversation, agent_id=agent_id, joined_at=joined_at)
    for account in accounts.values():
        membership_join(conversation=conversation, account_id=account.id, joined_at=joined_at)
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
            (message.id, key(turn.dia_id)) for message, turn in zip(messages, batch, strict=True)
        )
    return conversation.id


def sample_load(sample: Sample, *, run_tag: str) -> Loaded:
    """Store a sample as the runtime would: two accounts named as the speakers, and one
    ``private`` conversation they and an agent joined before its first turn, holding every
    session's turns in order at the session's time. Private with all three as members lets a
    run there, for either speaker, receive every turn (SPEC §3, rule 3)."""
    workspace = workspace_create(slug=f"locomo-{sample.sample_id}-{run_tag}")
    accounts = _speakers_create(workspace.id, sample)
    agent = agent_create(workspace_id=workspace.id, name="LoCoMo agent")
    dia_ids: dict[uuid.UUID, Hashable] = {}
    conversation_id = _conversation_load(
        sample,
        workspace_id=workspace.id,
        agent_id=agent.id,
        accounts=accounts,
        dia_ids=dia_ids,
        key=lambda dia_id: dia_id,
    )
    return Loaded(
        workspace_id=workspace.id,
        agent_id=agent.id,
        conversation_id=conversation_id,
        requester_id=accounts[sample.speaker_a].id,
        dia_ids=dia_ids,
    )


def pooled_load(
    samples: Sequence[Sample], *, run_tag: str, kind: str = ConversationKind.PRIVATE
) -> dict[str, Loaded]:
    """Store every sample in one workspace, with one agent that is a member of all their
    conversations: each sample's speakers are accounts of their own (two samples' "John"s are
    two people), and each conversation is ``private`` to its two speakers and the agent, as
    ``sample_load`` makes it. Each message's turn is its ``(sample_id, dia_id)``; the answer
    is each sample's ``Loaded`` (its conversation and its speaker A), by sample_id.

    Private, no other sample's turn is eligible for a run in a sample's conversation (its
    readers read no other: SPEC §3, rule 3), so search_history ranks as ``sample_load``'s
    would, only reading (and withholding) more. ``kind="public"`` makes every conversation a
    workspace-public channel, eligible for every run of the workspace: the pool where the
    other conversations' turns compete."""
    workspace = workspace_create(slug=f"locomo-pooled-{run_tag}")
    agent = agent_create(workspace_id=workspace.id, name="LoCoMo agent")
    dia_ids: dict[uuid.UUID, Hashable] = {}
    pool: dict[str, Loaded] = {}
    for sample in samples:
        if sample.sample_id in pool:
            raise ValueError(f"{sample.sample_id} is twice in the pool")
        accounts = _speakers_create(workspace.id, sample)
        conversation_id = _conversation_load(
            sample,
            workspace_id=workspace.id,
            agent_id=agent.id,
            accounts=accounts,
            dia_ids=dia_ids,
            key=lambda dia_id, sample_id=sample.sample_id: (sample_id, dia_id),
            kind=kind,
        )
        pool[sample.sample_id] = Loaded(
            workspace_id=workspace.id,
            agent_id=agent.id,
            conversation_id=conversation_id,
            requester_id=accounts[sample.speaker_a].id,
            dia_ids=dia_ids,
        )
    return pool


@dataclass
class Ranking:
    """One question's answer: the turns ranked best first, the context of the first
    ``CONTEXT_CUTOFF`` (those hits and their neighbours), and the call's milliseconds."""

    ranked: list[Hashable]
    context: set[Hashable]
    milliseconds: float
    # Calls cancelled by the statement timeout (served only: 503) before this answer.
    timeouts: int = 0
    # search_history only, when asked for: the turns its statement held as candidates, each
    # term's kept matches (``matches``) and the pool it ranked (``candidates``).
    candidates: dict[str, set[Hashable]] | None = None


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


MATCHES, RANKED = "matches", "candidates"


def search_history_candidates(loaded: Loaded, question: Question) -> dict[str, set[Hashable]]:
    """What search_history's statement held for ``question``, from a fresh run of the agent:
    its ``matches`` (each term's kept matches) and ``candidates`` (every turn it ranked, the
    named participants' neighbours too) CTEs, by turn. The statement is the product's own
    (``hits_statement``, routes from the statistics now), its answer replaced by those two
    CTEs' ids, run in a transaction that is rolled back (it records evidence and an audit
    row). Untimed; empty for a query with no searchable word."""
    from django.db import connection, transaction
    from django.utils import timezone

    from search_app.history import answer, record, terms
    from search_app.history.statement import hits_statement
    from search_app.query.parse import parse_query
    from search_app.scope import Perspective

    found: dict[str, set[Hashable]] = {MATCHES: set(), RANKED: set()}
    try:
        query = parse_query(question.text, workspace_id=loaded.workspace_id)
    except InvalidArguments:
        return found
    run, _ = run_create(
        workspace_id=loaded.workspace_id,
        agent_id=loaded.agent_id,
        conversation_id=loaded.conversation_id,
        requester_id=loaded.requester_id,
    )
    sql, params = hits_statement(
        Perspective(
            workspace_id=loaded.workspace_id,
            agent_id=loaded.agent_id,
            destination_id=loaded.conversation_id,
            destination_kind="",
            requester_id=loaded.requester_id,
            current_message_id=None,
            recent_message_ids=(),
            run_id=run.id,
        ),
        query,
        HistoryFilters(),
        limit=LIMIT,
        now=timezone.now(),
        routes=terms.routes(query, terms.frequencies(loaded.workspace_id)),
    )
    final = answer.answer(recorded=record.in_statement())
    if sql.count(final) != 1:
        raise RuntimeError("The statement's answer is not where the benchmark looks for it.")
    ids = f"SELECT '{MATCHES}', id FROM matches UNION ALL SELECT '{RANKED}', id FROM candidates"
    sql = sql.replace(final, ids)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql, params)
        for cte, message_id in cursor.fetchall():
            found[cte].add(loaded.dia_ids[message_id])
        transaction.set_rollback(True)
    return found


class Fts5Index:
    """The baseline: SQLite FTS5 (porter stemming over unicode61) over one sample's turns,
    in memory, its question words each quoted and OR-ed, ranked by ``bm25()``. ``pooled``
    indexes every sample's turns together in one table, ranked over all of them (its rarity
    weights are the pool's), each turn known by ``(sample_id, dia_id)``; a hit's neighbours
    are always of its own conversation."""

    def __init__(self, sample: Sample) -> None:
        self._index([[(turn.dia_id, turn.text) for turn in sample.turns]])

    @classmethod
    def pooled(cls, samples: Sequence[Sample]) -> Fts5Index:
        index = cls.__new__(cls)
        index._index(
            [[((s.sample_id, turn.dia_id), turn.text) for turn in s.turns] for s in samples]
        )
        return index

    def _index(self, conversations: Sequence[Sequence[tuple[Hashable, str]]]) -> None:
        """Every conversation's turns, in order, one conversation after another; a turn's
        rowid is its position, and ``bounds`` its conversation's first and past-last."""
        self.turns: list[Hashable] = []
        self.bounds: list[tuple[int, int]] = []
        texts = []
        for turns in conversations:
            first = len(self.turns)
            self.turns += [key for key, _ in turns]
            texts += [text for _, text in turns]
            self.bounds += [(first, len(self.turns))] * len(turns)
        self.db = sqlite3.connect(":memory:")
        self.db.execute("CREATE VIRTUAL TABLE turns USING fts5(body, tokenize='porter unicode61')")
        self.db.executemany("INSERT INTO turns (rowid, body) VALUES (?, ?)", list(enumerate(texts)))

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
            if self.bounds[position][0] <= near < self.bounds[position][1]
        }
        return Ranking([self.turns[position] for position in positions], context, milliseconds)

    def close(self) -> None:
        self.db.close()


@dataclass(frozen=True)
class Score:
    """One question's figures for one system; ``sample`` is its conversation, and ``other``
    (pooled only) the share of its top ``CONTEXT_CUTOFF`` hits from another conversation."""

    category: int
    recall: dict[int, float]
    hit: dict[int, float]
    reciprocal_rank: float
    context_recall: float
    milliseconds: float
    sample: str = ""
    other: float | None = None
    timeouts: int = 0
    # With the candidates known: the question's evidence turns, and how many of them were never
    # among each term's kept matches, and never in the pool ranked.
    evidence: int = 0
    not_matched: int | None = None
    not_ranked: int | None = None


def score(question: Question, ranking: Ranking, sample: str = "", *, pooled: bool = False) -> Score:
    """The figures of ``ranking`` for ``question`` of ``sample``; ``pooled``, the ranking's
    turns are ``(sample_id, dia_id)`` and only the question's own sample's turns count."""
    evidence: frozenset[Hashable] = question.evidence
    other = None
    if pooled:
        evidence = frozenset((sample, dia_id) for dia_id in question.evidence)
        top = ranking.ranked[:CONTEXT_CUTOFF]
        other = sum(key[0] != sample for key in top) / len(top) if top else 0.0
    first = next((rank for rank, turn in enumerate(ranking.ranked, 1) if turn in evidence), None)
    return Score(
        category=question.category,
        recall={k: len(evidence.intersection(ranking.ranked[:k])) / len(evidence) for k in CUTOFFS},
        hit={k: float(bool(evidence.intersection(ranking.ranked[:k]))) for k in CUTOFFS},
        reciprocal_rank=1 / first if first else 0.0,
        context_recall=len(evidence & ranking.context) / len(evidence),
        milliseconds=ranking.milliseconds,
        sample=sample,
        other=other,
        timeouts=ranking.timeouts,
        evidence=len(evidence),
        not_matched=(
            None if ranking.candidates is None else len(evidence - ranking.candidates[MATCHES])
        ),
        not_ranked=(
            None if ranking.candidates is None else len(evidence - ranking.candidates[RANKED])
        ),
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
    figures["timeouts"] = sum(s.timeouts for s in scores)
    known = [s for s in scores if s.not_matched is not None]
    if known:
        figures["evidence_turns"] = sum(s.evidence for s in known)
        figures["evidence_not_matched"] = sum(s.not_matched for s in known)
        figures["evidence_not_ranked"] = sum(s.not_ranked for s in known)
    others = [s.other for s in scores if s.other is not None]
    if others:
        figures[OTHER] = statistics.fmean(others)
    return figures


def grouped(scores: Sequence[Score]) -> dict[str, dict[str, float]]:
    """``{"overall" | category name: {metric: value}}`` of a group of scores."""
    table = {"overall": summary(scores)}
    for number, name in CATEGORIES.items():
        table[name] = summary([s for s in scores if s.category == number])
    return table


@dataclass
class Report:
    """Every question's scores by system, and the figures per category and overall, of all
    the conversations together and of each one (``pooled``: asked of one agent of them all)."""

    samples: list[str] = field(default_factory=list)
    turns: int = 0
    scores: dict[str, list[Score]] = field(default_factory=lambda: {s: [] for s in SYSTEMS})
    pooled: bool = False
    # Leave-one-out only: distractor messages per case, and whether newer or older.
    distractors: int | None = None
    when: str | None = None

    def figures(self) -> dict[str, dict[str, dict[str, float]]]:
        """``{system: {"overall" | category name: {metric: value}}}``."""
        return {system: grouped(scores) for system, scores in self.scores.items()}

    def per_conversation(self) -> dict[str, dict[str, dict[str, dict[str, float]]]]:
        """``{system: {sample_id: {"overall" | category name: {metric: value}}}}``."""
        return {
            system: {
                sample: grouped([s for s in scores if s.sample == sample])
                for sample in self.samples
            }
            for system, scores in self.scores.items()
        }


class Searcher(Protocol):
    """How search_history is asked: in this process (``InProcess``), or served
    (``bench/relevance.py``). ``reset`` comes before a leave-one-out case is loaded, ``ready``
    after each load, before its questions."""

    def reset(self) -> None: ...

    def ready(self) -> None: ...

    def ranking(self, loaded: Loaded, question: Question) -> Ranking: ...


class InProcess:
    """``search_history_ranking`` in this process, on whatever the connection sees; with
    ``candidates``, each ranking also says what the statement held as candidates (untimed)."""

    def __init__(self, *, candidates: bool = False) -> None:
        self.candidates = candidates

    def reset(self) -> None:
        pass

    def ready(self) -> None:
        pass

    def ranking(self, loaded: Loaded, question: Question) -> Ranking:
        found = search_history_ranking(loaded, question)
        if self.candidates:
            found.candidates = search_history_candidates(loaded, question)
        return found


def run_benchmark(
    samples: Sequence[Sample],
    *,
    limit: int | None = None,
    pooled: bool = False,
    kind: str = ConversationKind.PRIVATE,
    distractors: int | None = None,
    when: str = "newer",
    seed: int = 1,
    searcher: Searcher | None = None,
    progress: Callable[[str], None] = lambda line: None,
) -> Report:
    """Load each sample into a fresh workspace and ask its questions (the first ``limit`` of
    each, if given) of both systems, question by question, so both see the same machine.
    ``pooled``: load them all into one workspace with one agent (``pooled_load``) and one
    baseline index (``Fts5Index.pooled``) first, then ask each sample's questions there;
    ``kind`` is what its conversations are (``pooled_load``). ``distractors`` (pooled only):
    leave-one-out, see ``_leave_one_out``."""
    report = Report(pooled=pooled)
    run_tag = secrets.token_hex(3)
    searcher = searcher or InProcess()
    if distractors is not None:
        if not pooled:
            raise ValueError("distractors are for the pooled benchmark")
        _leave_one_out(
            samples,
            report,
            run_tag=run_tag,
            limit=limit,
            kind=kind,
            count=distractors,
            when=when,
            seed=seed,
            searcher=searcher,
            progress=progress,
        )
        return report
    if pooled:
        searcher.reset()
        pool = pooled_load(samples, run_tag=run_tag, kind=kind)
        pooled_baseline = Fts5Index.pooled(samples)
        searcher.ready()
        progress(
            f"pooled: {len(samples)} {kind} conversations, "
            f"{sum(len(sample.turns) for sample in samples)} turns, one agent"
        )
    for sample in samples:
        if pooled:
            loaded, baseline = pool[sample.sample_id], pooled_baseline
        else:
            searcher.reset()
            loaded, baseline = sample_load(sample, run_tag=run_tag), Fts5Index(sample)
            searcher.ready()
        questions = sample.questions[:limit]
        _ask(report, sample, questions, loaded, baseline, searcher, pooled=pooled)
        if not pooled:
            baseline.close()
        report.samples.append(sample.sample_id)
        report.turns += len(sample.turns)
        progress(f"{sample.sample_id}: {len(sample.turns)} turns, {len(questions)} questions")
    if pooled:
        pooled_baseline.close()
    return report


def _ask(
    report: Report,
    sample: Sample,
    questions: Sequence[Question],
    loaded: Loaded,
    baseline: Fts5Index,
    searcher: Searcher,
    *,
    pooled: bool,
) -> None:
    """Each question of both systems in turn, its scores into ``report``."""
    for question in questions:
        report.scores[SEARCH_HISTORY].append(
            score(question, searcher.ranking(loaded, question), sample.sample_id, pooled=pooled)
        )
        report.scores[FTS5].append(
            score(question, baseline.ranking(question), sample.sample_id, pooled=pooled)
        )


def _leave_one_out(
    samples: Sequence[Sample],
    report: Report,
    *,
    run_tag: str,
    limit: int | None,
    kind: str,
    count: int,
    when: str,
    seed: int,
    searcher: Searcher,
    progress: Callable[[str], None],
) -> None:
    """The busy agent with ``count`` distractor messages ``when`` (newer or older) than
    every sample: one case per sample, each a workspace of its own holding every sample (as
    ``pooled_load``) and copies of the *other* samples only (``relevance_distractors``), so
    no copy of a question's own conversation, whose turns hold its answers, competes with it;
    only that sample's questions are asked there, of search_history and of FTS5 over every
    turn of the case. ``searcher.reset`` comes before each case (the served benchmark empties
    its database there, so each case is searched alone), ``searcher.ready`` after its load."""
    from bench import relevance_distractors  # It builds on this module's samples.

    report.distractors = count
    report.when = when
    for sample in samples:
        copies = relevance_distractors.distractor_samples(
            [other for other in samples if other is not sample],
            count=count,
            when=when,
            asked=samples,
            seed=seed,
        )
        searcher.reset()
        began = time.perf_counter()
        loaded = pooled_load(samples, run_tag=f"{run_tag}-{sample.sample_id}", kind=kind)[
            sample.sample_id
        ]
        relevance_distractors.distractors_load(
            copies,
            workspace_id=loaded.workspace_id,
            agent_id=loaded.agent_id,
            dia_ids=loaded.dia_ids,
            kind=kind,
        )
        loading = time.perf_counter() - began
        searcher.ready()
        baseline = Fts5Index.pooled([*samples, *copies])
        questions = sample.questions[:limit]
        _ask(report, sample, questions, loaded, baseline, searcher, pooled=True)
        baseline.close()
        report.samples.append(sample.sample_id)
        report.turns += len(sample.turns)
        progress(
            f"{sample.sample_id}: {len(questions)} questions, {len(copies)} distractor "
            f"conversations ({sum(len(c.turns) for c in copies)} turns, {when}) loaded with "
            f"the pool in {loading:.1f} s"
        )


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


# Pooled only: the share of the top 8 hits that are another conversation's.
OTHER_COLUMN = (OTHER, "other conv @8", "{:.3f}")


def markdown_table(report: Report) -> str:
    """Both systems side by side, overall then per category, as a Markdown table."""
    figures = report.figures()
    columns = (*COLUMNS, OTHER_COLUMN) if report.pooled else COLUMNS
    lines = [
        "| questions | system | " + " | ".join(title for _, title, _ in columns) + " |",
        "|---|---|" + "--:|" * len(columns),
    ]
    for group in ("overall", *CATEGORIES.values()):
        for system, name in SYSTEMS.items():
            row = figures[system][group]
            cells = [fmt.format(row[key]) if key in row else "-" for key, _, fmt in columns]
            lines.append(f"| {group} | {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def per_conversation_table(report: Report) -> str:
    """Each conversation's figures, both systems side by side: what a leave-one-out check
    reads (a change must help each conversation, not only their sum). The category columns
    are recall@20, the category's question count in brackets."""
    figures = report.per_conversation()
    columns = [("recall@8", "R@8"), ("recall@20", "R@20"), ("hit@8", "hit@8")]
    if report.pooled:
        columns.append((OTHER, "other conv @8"))
    titles = [title for _, title in columns] + [f"{name} R@20" for name in CATEGORIES.values()]
    lines = [
        "| conversation | system | n | " + " | ".join(titles) + " |",
        "|---|---|" + "--:|" * (len(titles) + 1),
    ]
    for sample in report.samples:
        for system, name in SYSTEMS.items():
            groups = figures[system][sample]
            overall = groups["overall"]
            cells = [f"{overall['n']:.0f}"]
            cells += [f"{overall[key]:.3f}" if key in overall else "-" for key, _ in columns]
            for category in CATEGORIES.values():
                row = groups[category]
                cells.append(f"{row['recall@20']:.3f} ({row['n']:.0f})" if row["n"] else "-")
            lines.append(f"| {sample} | {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
