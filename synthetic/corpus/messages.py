"""The corpus's messages, in time order and in chunks, as ``COPY`` rows split by workspace.

Like the world plan, every step draws from the corpus's one random stream in a fixed order, and
that order is part of the output.
"""

from __future__ import annotations

import itertools
import random
from bisect import bisect
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field

from messages_app.models import MessageRole, MessageStatus
from messages_app.services import lineage_sources
from synthetic.corpus.parameters import (
    CONVERSATION_SKEW,
    DELETED_SHARE,
    EDITED_SHARE,
    GROWTH,
    LINEAGE_CHAIN_SHARE,
    LINEAGE_SHARE,
    REPLY_SHARE,
    THREAD_SHARE,
    WORDS_PER_MESSAGE,
)
from synthetic.corpus.plan import Room, World
from synthetic.corpus.rows import DAY_US, NULL, SPAN_US, Ids, stamp
from synthetic.corpus.vocabulary import word_table


@dataclass
class Part:
    """One workspace's share of a chunk: what one transaction of one connection loads."""

    messages: list[str] = field(default_factory=list)
    lineage: list[str] = field(default_factory=list)
    # conversation id -> [messages added, live messages added, the first one's seq]
    counters: dict[str, list[int]] = field(default_factory=dict)
    deleted: int = 0

    @classmethod
    def merge(cls, parts: list[Part]) -> Part:
        merged = cls()
        for part in parts:
            merged.messages += part.messages
            merged.lineage += part.lineage
            merged.counters.update(part.counters)
            merged.deleted += part.deleted
        return merged


@dataclass
class Chunk:
    parts: list[Part]  # indexed by workspace

    @property
    def size(self) -> int:
        return sum(len(part.messages) for part in self.parts)


def message_chunks(
    rng: random.Random, world: World, vocabulary: list[str], *, total: int, sizes: list[int]
) -> Iterator[Chunk]:
    """The messages in time order, chunk by chunk, so seq follows created_at in every room.

    Senders are members at the time they speak (the room's founder otherwise); agents build
    lineage from messages they observed, sometimes from their own earlier replies, so closures
    two and three levels deep occur. Sources always precede the reply, as in the services.
    """
    writer = _MessageWriter(rng, world, vocabulary, total=total)
    for size in sizes:
        parts = [Part() for _ in world.workspace_ids]
        for _ in range(size):
            writer.write(parts)
        yield Chunk(parts)


def _rooms_by_traffic(rng: random.Random, world: World) -> list[Room]:
    """The rooms from busiest to quietest (rank r gets weight 1/r**CONVERSATION_SKEW)."""
    rooms = list(world.rooms)
    rng.shuffle(rooms)  # Busy rooms land in every workspace and kind, the busy agent's too.
    # The busiest of all is the busy agent's first room, a public channel: a benchmark's deep
    # list_messages pages need one that large.
    rooms.remove(world.rooms[0])
    rooms.insert(0, world.rooms[0])
    return rooms


class _MessageWriter:
    """The generator's state between messages: the rooms' traffic weights, what each agent
    observed and replied, and every lineage-bearing message's closure."""

    def __init__(
        self, rng: random.Random, world: World, vocabulary: list[str], *, total: int
    ) -> None:
        self.rng = rng
        self.new_id = Ids(rng)
        self.words = word_table(vocabulary)
        self.rooms = _rooms_by_traffic(rng, world)
        self.cum_weights = list(
            itertools.accumulate(1.0 / r**CONVERSATION_SKEW for r in range(1, len(self.rooms) + 1))
        )
        self.workspace_ids = world.workspace_ids
        self.total = total
        self.position = 0
        self.observed_by: dict[str, deque] = {}
        self.replies_by: dict[str, deque] = {}
        self.closure: dict[str, tuple[str, ...]] = {}

    def write(self, parts: list[Part]) -> None:
        """The next message: its time, room, sender, references, lineage and body."""
        random_, choice = self.rng.random, self.rng.choice
        created = int(SPAN_US * ((self.position + random_()) / self.total) ** GROWTH)
        self.position += 1
        room = self.rooms[bisect(self.cum_weights, random_() * self.cum_weights[-1])]
        part = parts[room.workspace]
        room.seq += 1
        message_id = self.new_id.timed(created)
        workspace_id = self.workspace_ids[room.workspace]
        account, agent, role, status = self._sender(room, created)
        reply_to = choice(room.recent) if room.recent and random_() < REPLY_SHARE else None
        thread = choice(room.roots) if room.roots and random_() < THREAD_SHARE else None
        if role == "assistant" and room.recent and random_() < LINEAGE_SHARE:
            self._lineage(part, room, message_id, agent, workspace_id)
        live, content, edited, deleted = self._body(created)
        part.deleted += not live
        part.messages.append(
            f"{message_id}\t{workspace_id}\t{room.id}\t{room.seq}\t{role}\t{status}\t"
            f"{account or NULL}\t{agent or NULL}\t{content}\t{stamp(created)}\t"
            f"{edited}\t{deleted}\t{reply_to or NULL}\t{thread or NULL}\n"
        )
        self._record(part, room, message_id, created, thread=thread, live=live)

    def _sender(self, room: Room, created: int) -> tuple[str | None, str | None, str, str]:
        """(account, agent, role, status): one of the room's agents by the room's agent share,
        if it is a member at the time; otherwise a person who is (the founder if the one drawn
        is not), or in a room without membership data one of its speakers."""
        random_, choice = self.rng.random, self.rng.choice
        if room.agents and random_() < room.agent_share:
            member = choice(room.agents)
            if member.joined <= created < member.left:
                draw = random_()
                role = "assistant" if draw < 0.9 else ("tool" if draw < 0.97 else "system")
                draw = random_()
                status = "sent" if draw < 0.97 else ("pending" if draw < 0.99 else "failed")
                return None, member.member_id, role, status
        if room.humans:
            member = choice(room.humans)
            if not member.joined <= created < member.left:
                member = room.humans[0]
            account = member.member_id
        else:
            account = choice(room.speakers)
        return account, None, MessageRole.USER.value, MessageStatus.SENT.value

    def _lineage(
        self, part: Part, room: Room, message_id: str, agent: str, workspace_id: str
    ) -> None:
        """An agent's reply builds on recent messages of the room or ones it observed, and
        sometimes on one of its own earlier replies; stored as its closure."""
        random_, choice = self.rng.random, self.rng.choice
        observed = self.observed_by.get(agent) or room.recent
        direct = [
            choice(room.recent) if random_() < 0.6 else choice(observed)
            for _ in range(choice((1, 1, 2, 3)))
        ]
        earlier = self.replies_by.get(agent)
        if earlier and random_() < LINEAGE_CHAIN_SHARE:
            direct.append(choice(earlier))
        direct, inherited = lineage_sources(direct, self.closure)
        self.closure[message_id] = (*direct, *inherited)
        part.lineage += [f"{workspace_id}\t{message_id}\t{s}\tt\n" for s in direct]
        part.lineage += [f"{workspace_id}\t{message_id}\t{s}\tf\n" for s in inherited]
        self.replies_by.setdefault(agent, deque(maxlen=50)).append(message_id)

    def _body(self, created: int) -> tuple[bool, str, str, str]:
        """(live, content, edited_at, deleted_at): a sentence of Zipf-drawn words, sometimes
        edited later; or, for a deleted message, what message_delete leaves."""
        rng = self.rng
        if rng.random() < DELETED_SHARE:
            # As message_delete leaves it: the row and its seq stay, the body is gone.
            deleted = stamp(min(created + rng.randrange(60_000_000, 30 * DAY_US), SPAN_US))
            return False, "", NULL, deleted
        low_words, high_words = WORDS_PER_MESSAGE
        text = " ".join(rng.choices(self.words, k=rng.randrange(low_words, high_words + 1)))
        draw = rng.random()
        ending = "." if draw < 0.8 else ("?" if draw < 0.95 else "!")
        edited = NULL
        if rng.random() < EDITED_SHARE:
            edited = stamp(min(created + rng.randrange(10_000_000, 3_600_000_000), SPAN_US))
        return True, text[0].upper() + text[1:] + ending, edited, NULL

    def _record(
        self,
        part: Part,
        room: Room,
        message_id: str,
        created: int,
        *,
        thread: str | None,
        live: bool,
    ) -> None:
        """The room's counters for the seq reservation, and what later messages may point at:
        the room's recent messages and thread roots, and what each present agent observed."""
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
                seen = self.observed_by.get(member.member_id)
                if seen is None:
                    seen = self.observed_by[member.member_id] = deque(maxlen=200)
                seen.append(message_id)
