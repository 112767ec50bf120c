"""Distractors for the busy-agent benchmark (``bench/relevance.py --distractors N``): real talk
the agent is a member of, that is not about anything asked, placed newer (or older) than every
conversation whose questions are asked.

With only the dev conversations at hand, a question's distractors are copies of the *other*
conversations (leave-one-out): ``distractor_samples`` copies them in turn, replicated until
``count`` messages (the last copy cut short), each copy with fresh speaker names, in its text
too, where every participant of the asked conversations is renamed as well, so no distractor
speaks as, or of, a person a question names. Each copy keeps its turns' order and its sessions'
shape, stretched linearly over a year that starts a day after the newest asked turn
(``newer``) or ends a day before the oldest (``older``), so copies interleave as an agent's
concurrent conversations do.

``distractors_load`` stores them with ``COPY`` (as ``synthetic/corpus`` does): the
conversations, accounts and memberships through the services, then the messages in a few
transactions, each reserving its seqs through ``seqs_reserve``; the search documents are
written by the same triggers as for any insert.
"""

from __future__ import annotations

import random
import re
import uuid
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from django.db import connection, transaction

from bench.relevance_core import Sample, Turn
from formation.sql import table
from messages_app.models import ConversationKind, Message, MessageRole, MessageStatus
from messages_app.services import (
    account_create,
    conversation_create,
    membership_join,
    seqs_reserve,
)

NEWER, OLDER = "newer", "older"
WHEN = (NEWER, OLDER)
# The distractors' year, a day clear of the asked conversations.
WINDOW = timedelta(days=365)
GAP = timedelta(days=1)
# Messages per COPY transaction.
CHUNK = 10_000
_SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]
_COPY_COLUMNS = (
    "id",
    "workspace_id",
    "conversation_id",
    "seq",
    "role",
    "status",
    "sender_account_id",
    "content",
    "created_at",
)


def _fresh_names(rng: random.Random, taken: set[str]) -> Iterator[str]:
    """Names no one has: three or four made-up syllables, none twice, none in ``taken``
    (compared case-blind)."""
    seen = {name.lower() for name in taken}
    while True:
        name = "".join(rng.choice(_SYLLABLES) for _ in range(rng.choice((3, 4)))).capitalize()
        if name.lower() not in seen:
            seen.add(name.lower())
            yield name


def participants(samples: Sequence[Sample]) -> set[str]:
    """Every speaker of ``samples``."""
    return {name for sample in samples for name in (sample.speaker_a, sample.speaker_b)}


def _window(asked: Sequence[Sample], when: str) -> datetime:
    """The start of the distractors' year."""
    if when == NEWER:
        return max(sample.turns[-1].created_at for sample in asked) + GAP
    if when == OLDER:
        return min(sample.turns[0].created_at for sample in asked) - GAP - WINDOW
    raise ValueError(f"when must be one of {WHEN}")


def distractor_samples(
    sources: Sequence[Sample],
    *,
    count: int,
    when: str,
    asked: Sequence[Sample],
    seed: int = 1,
) -> list[Sample]:
    """Copies of ``sources`` in turn, ``count`` turns in all, each a conversation of two
    people with fresh names, no question of its own, in the year after (``newer``) or before
    (``older``) every turn of ``asked``. Each copy's ``sample_id`` is its source's with
    ``#k`` (the k-th copy), so a copy's turns are known apart from its source's."""
    if count < 0:
        raise ValueError("count must be at least 0")
    sources = [source for source in sources if source.turns]
    if count and not sources:
        raise ValueError("distractors need at least one source conversation")
    start = _window(asked, when)
    rng = random.Random(seed)
    renamed = participants(asked) | participants(sources)
    names = _fresh_names(rng, renamed)
    longest_first = sorted(renamed, key=len, reverse=True)
    pattern = re.compile(
        r"\b(" + "|".join(re.escape(name) for name in longest_first) + r")\b", re.IGNORECASE
    )
    copies: list[Sample] = []
    left = count
    while left > 0:
        source = sources[len(copies) % len(sources)]
        fresh: dict[str, str] = {
            source.speaker_a.lower(): next(names),
            source.speaker_b.lower(): next(names),
        }

        def rename(match: re.Match, fresh: dict[str, str] = fresh) -> str:
            key = match.group(0).lower()
            if key not in fresh:
                fresh[key] = next(names)
            return fresh[key]

        first, last = source.turns[0].created_at, source.turns[-1].created_at
        span = max(last - first, timedelta(seconds=1))
        # Spread over the year less an hour, the copy's number in seconds keeping copies apart.
        stretch = (WINDOW - timedelta(hours=1)) / span
        offset = timedelta(seconds=len(copies))
        turns = tuple(
            Turn(
                turn.dia_id,
                fresh[turn.speaker.lower()],
                pattern.sub(rename, turn.text),
                start + offset + (turn.created_at - first) * stretch,
            )
            for turn in source.turns[:left]
        )
        copies.append(
            replace(
                source,
                sample_id=f"{source.sample_id}#{len(copies)}",
                speaker_a=fresh[source.speaker_a.lower()],
                speaker_b=fresh[source.speaker_b.lower()],
                turns=turns,
                questions=(),
            )
        )
        left -= len(turns)
    return copies


def distractors_load(
    copies: Sequence[Sample],
    *,
    workspace_id: uuid.UUID,
    agent_id: uuid.UUID,
    dia_ids: dict[uuid.UUID, Hashable],
    kind: str = ConversationKind.PUBLIC,
) -> None:
    """Store ``copies`` in the workspace: each a ``kind`` conversation its two speakers (new
    accounts) and the agent joined a minute before its first turn; the messages by ``COPY``,
    ``CHUNK`` a transaction, each message's ``(sample_id, dia_id)`` into ``dia_ids``."""
    rows: list[tuple] = []
    counts: dict[uuid.UUID, int] = {}
    for copy in copies:
        conversation = conversation_create(
            workspace_id=workspace_id, kind=kind, title=copy.sample_id
        )
        joined_at = copy.turns[0].created_at - timedelta(minutes=1)
        membership_join(conversation=conversation, agent_id=agent_id, joined_at=joined_at)
        accounts = {}
        for name in (copy.speaker_a, copy.speaker_b):
            accounts[name] = account_create(workspace_id=workspace_id, display_name=name).id
            membership_join(
                conversation=conversation, account_id=accounts[name], joined_at=joined_at
            )
        for turn in copy.turns:
            message_id = uuid.uuid4()
            dia_ids[message_id] = (copy.sample_id, turn.dia_id)
            rows.append(
                (message_id, conversation.id, accounts[turn.speaker], turn.text, turn.created_at)
            )
        counts[conversation.id] = 0
    for begin in range(0, len(rows), CHUNK):
        _copy_chunk(rows[begin : begin + CHUNK], workspace_id, counts)


def _copy_chunk(rows: Sequence[tuple], workspace_id: uuid.UUID, seqs: dict[uuid.UUID, int]) -> None:
    """One transaction: the chunk's seqs reserved as every write reserves them, then its
    messages copied in (``seqs`` holds each conversation's seqs used so far)."""
    added: dict[uuid.UUID, int] = {}
    for _, conversation_id, *_ in rows:
        added[conversation_id] = added.get(conversation_id, 0) + 1
    with transaction.atomic(), connection.connection.cursor() as cursor:
        cursor.execute("SET LOCAL gin_pending_list_limit = '32MB'")
        cursor.execute("SET LOCAL work_mem = '128MB'")
        first = seqs_reserve({room: (n, n) for room, n in added.items()}, workspace_id=workspace_id)
        expected = {room: seqs[room] + 1 for room in added}
        if first != expected:
            raise RuntimeError("The distractors' seqs are out of step with their conversations.")
        with cursor.copy(f"COPY {table(Message)} ({', '.join(_COPY_COLUMNS)}) FROM STDIN") as out:
            for message_id, conversation_id, account_id, text, created_at in rows:
                seqs[conversation_id] += 1
                out.write_row(
                    (
                        message_id,
                        workspace_id,
                        conversation_id,
                        seqs[conversation_id],
                        MessageRole.USER,
                        MessageStatus.SENT,
                        account_id,
                        text,
                        created_at,
                    )
                )
