"""A deterministic synthetic corpus at benchmark scale, loaded through PostgreSQL ``COPY``.

Why ``COPY`` rather than ``messages_create``: it is the database's cheapest way in (the ORM
path costs about twice the database's own work per message; see the bulk-ingest row of
``bench/benchmark.py``), and the rows can carry their final state directly (ids, times,
deletions, lineage closures) instead of replaying thousands of deletes. Nothing is bypassed,
though: every check constraint, foreign key (immediate and deferred), index, and the
statement-level triggers that write ``message_search_documents`` fire for ``COPY`` exactly as for
``INSERT``, so a loaded corpus is indistinguishable from one ingested through the API
(``rebuild_search_documents --check`` finds nothing to fix). What the services compute in Python
comes from the services' own code: each chunk's seqs are reserved by
``messages_app.services.seqs_reserve`` (``Conversation.last_seq`` and ``live_message_count``,
in the same transaction as the messages they count), and must be the ones the rows carry, so a
gap or a repeat stops the load; lineage is stored as its transitive closure with ``direct``
flags, built by ``services.lineage_sources`` as for an API write; and deletion is left as
``services.message_delete`` leaves it (body erased, ``deleted_at`` set).

Determinism: ids, names, words and times all come from ``random.Random`` instances seeded from
``seed`` and consumed in a fixed order, and times are anchored at ``CORPUS_END`` rather than
now, so the same arguments write the same rows byte for byte (``CorpusReport.digest``), however
many workers load them.

Messages go in time order, in chunks, one transaction each (the database is consistent after
every commit), with ``ANALYZE`` after the first small chunk: foreign-key checks are planned from
table statistics, and against a table the planner believes empty they scan it, which goes
quadratic. A thread generates the next chunk while PostgreSQL ingests the current one, and with
``workers`` > 1 each workspace's share goes to one of several connections (see ``_Loaders``):
on two cores the index, trigger and foreign-key work of one backend is what limits the load.
"""

from __future__ import annotations

import hashlib
import itertools
import queue
import random
import threading
import time
import uuid
from bisect import bisect
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.db import connection, models, transaction

from messages_app.models import (
    Account,
    Agent,
    Conversation,
    ConversationKind,
    IdentityLink,
    IdentityLinkStatus,
    Membership,
    Message,
    MessageLineage,
    MessageRole,
    MessageStatus,
    Workspace,
)
from messages_app.services import lineage_sources, seqs_reserve
from search_app.models import MessageSearchDocument

VOCABULARY_SIZE = 25_000
# Word rank r is drawn with weight 1 / r**ZIPF_EXPONENT, conversation rank likewise.
ZIPF_EXPONENT = 1.0
CONVERSATION_SKEW = 1.0
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
ZIPF_TABLE_SIZE = 2**22
# Within one workspace, conversation k has kind KIND_CYCLE[k % 20]: every kind is present as
# soon as a workspace has four conversations.
KIND_CYCLE = (
    ("public", "private", "direct", "unknown")
    + ("public", "private", "direct", "private", "direct") * 3
    + ("unknown",)
)
MIN_CONVERSATIONS_PER_WORKSPACE = 4

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

_NULL = "\\N"
_START = CORPUS_END - CORPUS_SPAN
_SPAN_US = int(CORPUS_SPAN.total_seconds()) * 1_000_000
_DAY_US = 86_400 * 1_000_000
_FOREVER = 2**62
_UUID_CLEAR = ~((0xF000 << 64) | (0xC000 << 48))
_UUID_V4 = (4 << 76) | (0x8000 << 48)
_UUID_V7 = (7 << 76) | (0x8000 << 48)
_START_MS = int(_START.timestamp() * 1000)

_MESSAGE_COLUMNS = (
    "id",
    "workspace_id",
    "conversation_id",
    "seq",
    "role",
    "status",
    "sender_account_id",
    "sender_agent_id",
    "content",
    "created_at",
    "edited_at",
    "deleted_at",
    "reply_to_id",
    "thread_id",
)
_LINEAGE_COLUMNS = ("workspace_id", "message_id", "source_id", "direct")


class CorpusError(ValueError):
    """Arguments the corpus cannot be built from, worded for the person at the terminal."""


@dataclass(frozen=True)
class CorpusProgress:
    loaded: int
    total: int
    seconds: float


@dataclass(frozen=True)
class CorpusReport:
    workspace_ids: tuple[uuid.UUID, ...]
    workspace_slugs: tuple[str, ...]
    busy_agent_id: uuid.UUID
    counts: dict[str, int]
    digest: str
    seconds: float


def workspace_slug(seed: int, index: int) -> str:
    """The slug of the corpus's ``index``-th workspace, so scripts find it without parsing."""
    return f"corpus-s{seed}-{index}"


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


def _stamp(microseconds: int) -> str:
    """A corpus time (microseconds after the start of the span) as COPY text."""
    return (_START + timedelta(microseconds=microseconds)).isoformat()


class _Ids:
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


@dataclass
class _Interval:
    member_id: str
    joined: int
    left: int = _FOREVER


@dataclass
class _Room:
    id: str
    workspace: int
    kind: str
    humans: list[_Interval] = field(default_factory=list)
    agents: list[_Interval] = field(default_factory=list)
    speakers: list[str] = field(default_factory=list)
    agent_share: float = 0.25
    seq: int = 0
    recent: deque = field(default_factory=lambda: deque(maxlen=40))
    roots: deque = field(default_factory=lambda: deque(maxlen=20))


@dataclass
class _World:
    """Everything but the messages: rows to COPY first, and the rooms messages go to."""

    workspace_ids: list[str]
    busy_agent_id: str
    rooms: list[_Room]
    tables: list[tuple[str, tuple[str, ...], list[str]]]
    counts: dict[str, int]


def _plan_world(
    rng: random.Random, *, seed: int, workspaces: int, conversations: int, vocabulary: list[str]
) -> _World:
    """Workspaces, people, agents, rooms, memberships and links, as COPY rows and as the rooms
    the message generator draws senders from."""
    new_id = _Ids(rng)
    name_words = vocabulary[200:5_000]

    def title_word() -> str:
        return rng.choice(name_words)

    workspace_rows, account_rows, agent_rows, conversation_rows = [], [], [], []
    membership_rows, link_rows = [], []
    workspace_ids: list[str] = []
    rooms: list[_Room] = []
    busy_agent_id = ""
    setup_time = _stamp(-60 * _DAY_US)

    def joined_and_left(room_created: int, *, may_leave: bool) -> list[_Interval]:
        """A member's intervals: most join at creation; some later, some leave, a few return."""
        joined = room_created if rng.random() < 0.8 else rng.randrange(0, _SPAN_US * 6 // 10)
        if not may_leave or rng.random() >= 0.15:
            return [_Interval("", joined)]
        left = rng.randrange(max(joined, 0) + _DAY_US, _SPAN_US)
        intervals = [_Interval("", joined, left)]
        back = left + 3_600_000_000
        if back < _SPAN_US and rng.random() < 1 / 3:
            intervals.append(_Interval("", rng.randrange(back, _SPAN_US)))
        return intervals

    def add_member(room: _Room, member_id: str, *, agent: bool, intervals: list[_Interval]):
        for interval in intervals:
            interval.member_id = member_id
            left = _NULL if interval.left == _FOREVER else _stamp(interval.left)
            account, agent_id = (_NULL, member_id) if agent else (member_id, _NULL)
            membership_rows.append(
                f"{new_id()}\t{workspace_ids[room.workspace]}\t{room.id}\t{account}\t"
                f"{agent_id}\t{_stamp(interval.joined)}\t{left}\n"
            )
        (room.agents if agent else room.humans).extend(intervals)

    base, extra = divmod(conversations, workspaces)
    for w in range(workspaces):
        workspace_id = new_id()
        workspace_ids.append(workspace_id)
        slug = workspace_slug(seed, w)
        workspace_rows.append(f"{workspace_id}\t{slug}\tSynthetic corpus {w}\t{setup_time}\n")
        room_count = base + (1 if w < extra else 0)

        accounts = []
        for a in range(max(6, room_count // 2)):
            account_id = new_id()
            accounts.append(account_id)
            name = f"{title_word().title()} {title_word().title()}"
            account_rows.append(
                f"{account_id}\t{workspace_id}\t{name}\tcorpus-person-{a:06d}\t{setup_time}\n"
            )
        agents = []
        for a in range(1 + max(2, room_count // 50)):
            agent_id = new_id()
            agents.append(agent_id)
            name = BUSY_AGENT_NAME if (w == 0 and a == 0) else f"Agent {title_word().title()}"
            agent_rows.append(f"{agent_id}\t{workspace_id}\t{name}\t{setup_time}\n")
        if w == 0:
            busy_agent_id = agents[0]
        helpers = agents[1:] if w == 0 else agents

        direct_humans = []
        for k in range(room_count):
            kind = KIND_CYCLE[k % len(KIND_CYCLE)]
            room = _Room(id=new_id(), workspace=w, kind=kind)
            created = -rng.randrange(_DAY_US, 60 * _DAY_US)
            if kind == ConversationKind.DIRECT:
                human = rng.choice(accounts)
                direct_humans.append(human)
                add_member(room, human, agent=False, intervals=[_Interval("", created)])
                title = f"Direct {k}"
                room.agent_share = 0.45
            elif kind == ConversationKind.UNKNOWN:
                # Imported without membership data: people speak, but nobody is on record.
                room.speakers = rng.sample(accounts, min(len(accounts), rng.randint(2, 8)))
                title = f"Imported {title_word()} {k}"
                room.agent_share = 0.2
            else:
                low, high = (5, 40) if kind == ConversationKind.PUBLIC else (2, 12)
                people = rng.sample(accounts, min(len(accounts), rng.randint(low, high)))
                # The first person founded the room and never leaves: the fallback speaker.
                add_member(room, people[0], agent=False, intervals=[_Interval("", created)])
                for person in people[1:]:
                    add_member(
                        room,
                        person,
                        agent=False,
                        intervals=joined_and_left(created, may_leave=True),
                    )
                prefix = "#" if kind == ConversationKind.PUBLIC else "private "
                title = f"{prefix}{title_word()}-{title_word()} {k}"
            busy = w == 0 and k < BUSY_AGENT_CONVERSATIONS
            home = busy_agent_id if busy else rng.choice(helpers)
            # The busy agent never leaves its first room, the corpus's busiest (see below).
            add_member(
                room, home, agent=True, intervals=joined_and_left(created, may_leave=busy and k > 0)
            )
            if kind != ConversationKind.DIRECT and len(helpers) > 1 and rng.random() < 0.15:
                second = rng.choice([agent for agent in helpers if agent != home])
                add_member(
                    room, second, agent=True, intervals=joined_and_left(created, may_leave=False)
                )
            conversation_rows.append(
                f"{room.id}\t{workspace_id}\t{kind}\t{title}\tcorpus-room-{k:06d}\t"
                f"{_stamp(created)}\t0\t0\n"
            )
            rooms.append(room)

        # Identity links in every state; half of them between people who each have a direct
        # conversation, the case where a live link lets history cross between two DMs.
        statuses = list(IdentityLinkStatus)
        pairs: set[tuple[str, str]] = set()
        wanted = max(3, len(accounts) // 6)
        for _ in range(wanted * 10):
            if len(pairs) == wanted:
                break
            pool = direct_humans if len(set(direct_humans)) > 2 and rng.random() < 0.5 else accounts
            first, second = rng.sample(pool, 2)
            pair = (min(first, second), max(first, second))
            if first == second or pair in pairs:
                continue
            n = len(pairs)
            pairs.add(pair)
            # The first three links take one state each, so every state is present.
            status = statuses[n] if n < 3 else rng.choices(statuses, weights=(3, 5, 2))[0]
            created = rng.randrange(0, _SPAN_US // 2)
            verified = revoked = _NULL
            if status == IdentityLinkStatus.VERIFIED or (
                status == IdentityLinkStatus.REVOKED and rng.random() < 0.5
            ):
                verified = _stamp(created + rng.randrange(60_000_000, 7 * _DAY_US))
            if status == IdentityLinkStatus.REVOKED:
                revoked = _stamp(created + rng.randrange(8 * _DAY_US, 90 * _DAY_US))
            link_rows.append(
                f"{new_id()}\t{workspace_id}\t{first}\t{second}\t{status.value}\t"
                f"{_stamp(created)}\t"
                f"{verified}\t{revoked}\n"
            )

    tables = [
        (Workspace._meta.db_table, ("id", "slug", "name", "created_at"), workspace_rows),
        (
            Account._meta.db_table,
            ("id", "workspace_id", "display_name", "external_id", "created_at"),
            account_rows,
        ),
        (Agent._meta.db_table, ("id", "workspace_id", "name", "created_at"), agent_rows),
        (
            Conversation._meta.db_table,
            (
                "id",
                "workspace_id",
                "kind",
                "title",
                "external_id",
                "created_at",
                "last_seq",
                "live_message_count",
            ),
            conversation_rows,
        ),
        (
            Membership._meta.db_table,
            (
                "id",
                "workspace_id",
                "conversation_id",
                "account_id",
                "agent_id",
                "joined_at",
                "left_at",
            ),
            membership_rows,
        ),
        (
            IdentityLink._meta.db_table,
            (
                "id",
                "workspace_id",
                "account_id",
                "linked_account_id",
                "status",
                "created_at",
                "verified_at",
                "revoked_at",
            ),
            link_rows,
        ),
    ]
    counts = {
        "workspaces": len(workspace_rows),
        "accounts": len(account_rows),
        "agents": len(agent_rows),
        "conversations": len(conversation_rows),
        "memberships": len(membership_rows),
        "identity_links": len(link_rows),
    }
    return _World(workspace_ids, busy_agent_id, rooms, tables, counts)


@dataclass
class _Part:
    """One workspace's share of a chunk: what one transaction of one connection loads."""

    messages: list[str] = field(default_factory=list)
    lineage: list[str] = field(default_factory=list)
    # conversation id -> [messages added, live messages added, the first one's seq]
    counters: dict[str, list[int]] = field(default_factory=dict)
    deleted: int = 0

    @classmethod
    def merge(cls, parts: list[_Part]) -> _Part:
        merged = cls()
        for part in parts:
            merged.messages += part.messages
            merged.lineage += part.lineage
            merged.counters.update(part.counters)
            merged.deleted += part.deleted
        return merged


@dataclass
class _Chunk:
    parts: list[_Part]  # indexed by workspace

    @property
    def size(self) -> int:
        return sum(len(part.messages) for part in self.parts)


def _word_table(vocabulary: list[str]) -> list[str]:
    """Each word repeated in proportion to 1/rank**ZIPF_EXPONENT (at least once), so drawing
    a word is one uniform pick instead of a binary search over cumulative weights."""
    weights = [1.0 / rank**ZIPF_EXPONENT for rank in range(1, len(vocabulary) + 1)]
    scale = ZIPF_TABLE_SIZE / sum(weights)
    table: list[str] = []
    for word, weight in zip(vocabulary, weights, strict=True):
        table += [word] * max(1, round(weight * scale))
    return table


def _message_chunks(
    rng: random.Random, world: _World, vocabulary: list[str], *, total: int, sizes: list[int]
) -> Iterator[_Chunk]:
    """The messages in time order, chunk by chunk, so seq follows created_at in every room.

    Senders are members at the time they speak (the room's founder otherwise); agents build
    lineage from messages they observed, sometimes from their own earlier replies, so closures
    two and three levels deep occur. Sources always precede the reply, as in the services.
    """
    new_id = _Ids(rng)
    random_, randrange, choice, choices = rng.random, rng.randrange, rng.choice, rng.choices
    words_table = _word_table(vocabulary)
    rooms = list(world.rooms)
    rng.shuffle(rooms)  # Busy rooms land in every workspace and kind, the busy agent's too.
    # The busiest of all is the busy agent's first room, a public channel: a benchmark's deep
    # list_messages pages need one that large.
    rooms.remove(world.rooms[0])
    rooms.insert(0, world.rooms[0])
    cum_rooms = list(
        itertools.accumulate(1.0 / r**CONVERSATION_SKEW for r in range(1, len(rooms) + 1))
    )
    room_total = cum_rooms[-1]
    workspace_ids = world.workspace_ids
    observed_by: dict[str, deque] = {}
    replies_by: dict[str, deque] = {}
    closure: dict[str, tuple[str, ...]] = {}
    low_words, high_words = WORDS_PER_MESSAGE
    position = 0
    for size in sizes:
        parts = [_Part() for _ in workspace_ids]
        for _ in range(size):
            created = int(_SPAN_US * ((position + random_()) / total) ** GROWTH)
            position += 1
            room = rooms[bisect(cum_rooms, random_() * room_total)]
            part = parts[room.workspace]
            room.seq += 1
            message_id = new_id.timed(created)
            workspace_id = workspace_ids[room.workspace]
            account = agent = None
            if room.agents and random_() < room.agent_share:
                member = choice(room.agents)
                if member.joined <= created < member.left:
                    agent = member.member_id
            if agent is None:
                role, status = MessageRole.USER.value, MessageStatus.SENT.value
                if room.humans:
                    member = choice(room.humans)
                    if not member.joined <= created < member.left:
                        member = room.humans[0]
                    account = member.member_id
                else:
                    account = choice(room.speakers)
            else:
                draw = random_()
                role = "assistant" if draw < 0.9 else ("tool" if draw < 0.97 else "system")
                draw = random_()
                status = "sent" if draw < 0.97 else ("pending" if draw < 0.99 else "failed")
            reply_to = choice(room.recent) if room.recent and random_() < REPLY_SHARE else None
            thread = choice(room.roots) if room.roots and random_() < THREAD_SHARE else None

            if role == "assistant" and room.recent and random_() < LINEAGE_SHARE:
                observed = observed_by.get(agent) or room.recent
                direct = [
                    choice(room.recent) if random_() < 0.6 else choice(observed)
                    for _ in range(choice((1, 1, 2, 3)))
                ]
                earlier = replies_by.get(agent)
                if earlier and random_() < LINEAGE_CHAIN_SHARE:
                    direct.append(choice(earlier))
                direct, inherited = lineage_sources(direct, closure)
                closure[message_id] = (*direct, *inherited)
                part.lineage += [f"{workspace_id}\t{message_id}\t{s}\tt\n" for s in direct]
                part.lineage += [f"{workspace_id}\t{message_id}\t{s}\tf\n" for s in inherited]
                replies_by.setdefault(agent, deque(maxlen=50)).append(message_id)

            edited = deleted = _NULL
            live = random_() >= DELETED_SHARE
            if live:
                text = " ".join(choices(words_table, k=randrange(low_words, high_words + 1)))
                draw = random_()
                ending = "." if draw < 0.8 else ("?" if draw < 0.95 else "!")
                content = text[0].upper() + text[1:] + ending
                if random_() < EDITED_SHARE:
                    edited = _stamp(min(created + randrange(10_000_000, 3_600_000_000), _SPAN_US))
            else:
                # As message_delete leaves it: the row and its seq stay, the body is gone.
                content = ""
                deleted = _stamp(min(created + randrange(60_000_000, 30 * _DAY_US), _SPAN_US))
                part.deleted += 1
            part.messages.append(
                f"{message_id}\t{workspace_id}\t{room.id}\t{room.seq}\t{role}\t{status}\t"
                f"{account or _NULL}\t{agent or _NULL}\t{content}\t{_stamp(created)}\t"
                f"{edited}\t{deleted}\t{reply_to or _NULL}\t{thread or _NULL}\n"
            )
            counter = part.counters.get(room.id)
            if counter is None:
                counter = part.counters[room.id] = [0, 0, room.seq]
            counter[0] += 1
            counter[1] += live
            room.recent.append(message_id)
            if thread is None:
                room.roots.append(message_id)
            for member in room.agents:
                if member.joined <= created < member.left:
                    seen = observed_by.get(member.member_id)
                    if seen is None:
                        seen = observed_by[member.member_id] = deque(maxlen=200)
                    seen.append(message_id)
        yield _Chunk(parts)


def _ahead(chunks: Iterator[_Chunk], depth: int = 2) -> Iterator[_Chunk]:
    """Run ``chunks`` in a thread, ``depth`` items ahead: Python builds the next chunk while
    PostgreSQL ingests this one (psycopg releases the GIL while it waits on the server)."""
    items: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()
    done = object()

    def produce() -> None:
        try:
            for chunk in chunks:
                if not _put(items, chunk, stop):
                    return
            _put(items, done, stop)
        except BaseException as problem:  # Re-raised in the consumer.
            _put(items, problem, stop)

    worker = threading.Thread(target=produce, name="corpus-generator", daemon=True)
    worker.start()
    try:
        while True:
            item = items.get()
            if item is done:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        worker.join()


def _put(items: queue.Queue, item: object, stop: threading.Event) -> bool:
    """Put ``item`` unless ``stop`` is set first (the other side gave up)."""
    while not stop.is_set():
        try:
            items.put(item, timeout=0.2)
            return True
        except queue.Full:
            continue
    return False


def _copy(cursor, table: str, columns: tuple[str, ...], rows: list[str]) -> None:
    if rows:
        with cursor.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
            copy.write("".join(rows).encode())


def _load(part: _Part) -> None:
    """One transaction on this thread's connection: the messages, their lineage, and the
    conversation counters, so the database is consistent after every commit."""
    with transaction.atomic(), connection.connection.cursor() as cursor:
        # A larger GIN pending list is merged into the trigram and search indexes in fewer,
        # larger batches: about a tenth less work for the same index contents.
        cursor.execute("SET LOCAL gin_pending_list_limit = '32MB'")
        cursor.execute("SET LOCAL work_mem = '128MB'")
        _reserve(part)
        _copy(cursor, Message._meta.db_table, _MESSAGE_COLUMNS, part.messages)
        _copy(cursor, MessageLineage._meta.db_table, _LINEAGE_COLUMNS, part.lineage)


def _reserve(part: _Part) -> None:
    """The part's seqs, reserved as every write reserves them: they must be the ones its rows
    carry (each room's next ones, in order), or the load stops before copying a row."""
    counts = {uuid.UUID(room): (added, live) for room, (added, live, _) in part.counters.items()}
    expected = {uuid.UUID(room): first for room, (_, _, first) in part.counters.items()}
    if seqs_reserve(counts) != expected:
        raise CorpusError("The generated seqs are out of step with the conversations' counters.")


class _Loaders:
    """``count`` threads, each loading its workspaces' parts on its own connection.

    Workspaces share no rows a load locks or references (foreign keys, lineage, replies and
    counters all stay inside one workspace), so the loaders never wait for each other's locks,
    and each loads its own parts in order, so every reference points at a committed row.
    """

    def __init__(self, count: int) -> None:
        self.count = count
        self.loaded = 0
        self.failed = threading.Event()
        self.errors: list[BaseException] = []
        self._lock = threading.Lock()
        self._inboxes = [queue.Queue(maxsize=2) for _ in range(count)]
        self._threads = [
            threading.Thread(target=self._run, args=(inbox,), name=f"corpus-loader-{n}")
            for n, inbox in enumerate(self._inboxes)
        ]
        for thread in self._threads:
            thread.start()

    def _run(self, inbox: queue.Queue) -> None:
        try:
            while (part := inbox.get()) is not None:
                if not self.failed.is_set():
                    _load(part)
                with self._lock:
                    self.loaded += len(part.messages)
        except BaseException as problem:
            self.errors.append(problem)
            self.failed.set()
        finally:
            connection.close()  # This thread's own connection.

    def submit(self, chunk: _Chunk) -> None:
        for n, inbox in enumerate(self._inboxes):
            part = _Part.merge(chunk.parts[n :: self.count])
            if not _put(inbox, part, self.failed):
                break
        self.raise_failure()

    def close(self) -> None:
        """Let every loader finish what it holds (a failed run only drains) and stop."""
        for inbox, thread in zip(self._inboxes, self._threads, strict=True):
            while thread.is_alive():
                try:
                    inbox.put(None, timeout=0.2)
                    break
                except queue.Full:
                    continue
        for thread in self._threads:
            thread.join()
        self.raise_failure()

    def raise_failure(self) -> None:
        if self.errors:
            raise self.errors[0]


def _chunk_sizes(total: int, chunk_size: int) -> list[int]:
    first = min(total, FIRST_CHUNK, chunk_size)
    sizes = [first]
    remaining = total - first
    while remaining > 0:
        sizes.append(min(chunk_size, remaining))
        remaining -= sizes[-1]
    return sizes


def _validate(
    *, messages: int, workspaces: int, conversations: int, seed: int, chunk_size: int, workers: int
) -> None:
    if not 1 <= messages <= MAX_MESSAGES:
        raise CorpusError(f"--messages must be between 1 and {MAX_MESSAGES}.")
    if not 1 <= workspaces <= MAX_WORKSPACES:
        raise CorpusError(f"--workspaces must be between 1 and {MAX_WORKSPACES}.")
    if not MIN_CONVERSATIONS_PER_WORKSPACE * workspaces <= conversations <= MAX_CONVERSATIONS:
        raise CorpusError(
            f"--conversations must be between {MIN_CONVERSATIONS_PER_WORKSPACE} per workspace "
            f"(so every kind is present) and {MAX_CONVERSATIONS}."
        )
    if seed < 0:
        raise CorpusError("--seed must be 0 or more.")
    if not 1_000 <= chunk_size <= 500_000:
        raise CorpusError("--chunk-size must be between 1000 and 500000.")
    if not 1 <= workers <= MAX_WORKERS:
        raise CorpusError(f"--workers must be between 1 and {MAX_WORKERS}.")
    if workers > 1 and connection.in_atomic_block:
        # Other connections cannot see this transaction's workspaces and conversations.
        raise CorpusError("Loading with several workers cannot happen inside a transaction.")
    slugs = [workspace_slug(seed, w) for w in range(workspaces)]
    if Workspace.objects.filter(slug__in=slugs).exists():
        raise CorpusError(
            f"A corpus with seed {seed} is already loaded here: use another --seed or database."
        )


def _analyze(*models: type[models.Model]) -> None:
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE " + ", ".join(model._meta.db_table for model in models))


def corpus_generate(
    *,
    messages: int,
    workspaces: int,
    conversations: int,
    seed: int,
    chunk_size: int = DEFAULT_CHUNK,
    workers: int = 1,
    progress: Callable[[CorpusProgress], None] | None = None,
) -> CorpusReport:
    """Generate and load the corpus; see the module docstring for what it holds and why.

    ``workers`` > 1 loads workspaces in parallel on that many connections (it needs at least as
    many workspaces to help, and cannot run inside a transaction). Raises ``CorpusError`` for
    arguments out of range or a seed already loaded here.
    """
    _validate(
        messages=messages,
        workspaces=workspaces,
        conversations=conversations,
        seed=seed,
        chunk_size=chunk_size,
        workers=workers,
    )
    started = time.perf_counter()
    vocabulary = corpus_vocabulary(seed)
    rng = random.Random(f"formation-corpus:{seed}")
    world = _plan_world(
        rng, seed=seed, workspaces=workspaces, conversations=conversations, vocabulary=vocabulary
    )
    digest = hashlib.sha256()
    connection.ensure_connection()
    with transaction.atomic(), connection.connection.cursor() as cursor:
        for table, columns, rows in world.tables:
            _copy(cursor, table, columns, rows)
            digest.update("".join(rows).encode())
    _analyze(Workspace, Account, Agent, Conversation, Membership, IdentityLink)

    counts = {**world.counts, "messages": 0, "deleted_messages": 0, "lineage_rows": 0}
    chunks = _ahead(
        _message_chunks(
            rng, world, vocabulary, total=messages, sizes=_chunk_sizes(messages, chunk_size)
        )
    )
    loaders: _Loaders | None = None
    loaded_here = 0
    try:
        for number, chunk in enumerate(chunks):
            for part in chunk.parts:
                digest.update("".join(part.messages).encode())
                digest.update("".join(part.lineage).encode())
                counts["messages"] += len(part.messages)
                counts["deleted_messages"] += part.deleted
                counts["lineage_rows"] += len(part.lineage)
            if number == 0 or workers == 1:
                _load(_Part.merge(chunk.parts))
                loaded_here += chunk.size
            else:
                loaders = loaders or _Loaders(min(workers, workspaces))
                loaders.submit(chunk)
            if number == 0:
                # Statistics for the foreign-key checks of every later chunk (see above).
                _analyze(Message, MessageSearchDocument, MessageLineage)
            if progress is not None:
                loaded = loaded_here + (loaders.loaded if loaders else 0)
                progress(CorpusProgress(loaded, messages, time.perf_counter() - started))
    finally:
        chunks.close()
        if loaders is not None:
            loaders.close()
    with connection.cursor() as cursor:
        # Merge what is still in the GIN pending lists, so the first searches do not scan them.
        for index in ("message_content_trgm", "search_document_gin"):
            cursor.execute("SELECT gin_clean_pending_list(%s::regclass)", [index])
    _analyze(Message, MessageSearchDocument, MessageLineage, Conversation)
    seconds = time.perf_counter() - started
    return CorpusReport(
        workspace_ids=tuple(uuid.UUID(w) for w in world.workspace_ids),
        workspace_slugs=tuple(workspace_slug(seed, w) for w in range(workspaces)),
        busy_agent_id=uuid.UUID(world.busy_agent_id),
        counts=counts,
        digest=digest.hexdigest(),
        seconds=seconds,
    )
