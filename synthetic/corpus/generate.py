"""``corpus_generate``: check the arguments, plan the world, load it, then stream the messages."""

from __future__ import annotations

import hashlib
import random
import time
import uuid
from collections.abc import Callable, Generator
from dataclasses import dataclass

from django.db import connection, transaction

from messages_app.models import (
    Account,
    Agent,
    Conversation,
    IdentityLink,
    Membership,
    Message,
    MessageLineage,
    Workspace,
)
from search_app.models import MessageSearchDocument
from synthetic.corpus.loading import Loaders, ahead, analyze, copy_rows, load_part
from synthetic.corpus.messages import Chunk, Part, message_chunks
from synthetic.corpus.parameters import (
    DEFAULT_CHUNK,
    FIRST_CHUNK,
    MAX_CONVERSATIONS,
    MAX_MESSAGES,
    MAX_WORKERS,
    MAX_WORKSPACES,
    MIN_CONVERSATIONS_PER_WORKSPACE,
    CorpusError,
    workspace_slug,
)
from synthetic.corpus.plan import World, plan_world
from synthetic.corpus.vocabulary import corpus_vocabulary


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
    """Generate and load the corpus; see the package docstring for what it holds and why.

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
    world = plan_world(
        rng, seed=seed, workspaces=workspaces, conversations=conversations, vocabulary=vocabulary
    )
    digest = hashlib.sha256()
    _load_world(world, digest)
    chunks = ahead(
        message_chunks(
            rng, world, vocabulary, total=messages, sizes=_chunk_sizes(messages, chunk_size)
        )
    )
    message_counts = _load_messages(
        chunks,
        digest,
        total=messages,
        workers=workers,
        loader_count=min(workers, workspaces),
        progress=progress,
        started=started,
    )
    with connection.cursor() as cursor:
        # Merge what is still in the GIN pending lists, so the first searches do not scan them.
        for index in ("message_content_trgm", "search_document_bucket_gin"):
            cursor.execute("SELECT gin_clean_pending_list(%s::regclass)", [index])
    analyze(Message, MessageSearchDocument, MessageLineage, Conversation)
    return CorpusReport(
        workspace_ids=tuple(uuid.UUID(w) for w in world.workspace_ids),
        workspace_slugs=tuple(workspace_slug(seed, w) for w in range(workspaces)),
        busy_agent_id=uuid.UUID(world.busy_agent_id),
        counts={**world.counts, **message_counts},
        digest=digest.hexdigest(),
        seconds=time.perf_counter() - started,
    )


def _load_world(world: World, digest: hashlib._Hash) -> None:
    """Everything but the messages, in one transaction, then statistics for what follows."""
    connection.ensure_connection()
    with transaction.atomic(), connection.connection.cursor() as cursor:
        for model, columns, rows in world.tables:
            copy_rows(cursor, model, columns, rows)
            digest.update("".join(rows).encode())
    analyze(Workspace, Account, Agent, Conversation, Membership, IdentityLink)


def _load_messages(
    chunks: Generator[Chunk, None, None],
    digest: hashlib._Hash,
    *,
    total: int,
    workers: int,
    loader_count: int,
    progress: Callable[[CorpusProgress], None] | None,
    started: float,
) -> dict[str, int]:
    """The chunks, the first on this connection (then ``ANALYZE``), the rest here too with one
    worker or else spread over ``loader_count`` loaders; the message counts they held."""
    counts = {"messages": 0, "deleted_messages": 0, "lineage_rows": 0}
    loaders: Loaders | None = None
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
                load_part(Part.merge(chunk.parts))
                loaded_here += chunk.size
            else:
                loaders = loaders or Loaders(loader_count)
                loaders.submit(chunk)
            if number == 0:
                # Foreign-key checks are planned from table statistics, and against a table
                # the planner believes empty they scan it, which goes quadratic.
                analyze(Message, MessageSearchDocument, MessageLineage)
            if progress is not None:
                loaded = loaded_here + (loaders.loaded if loaders else 0)
                progress(CorpusProgress(loaded, total, time.perf_counter() - started))
    finally:
        chunks.close()
        if loaders is not None:
            loaders.close()
    return counts


def _chunk_sizes(total: int, chunk_size: int) -> list[int]:
    """A small first chunk (loaded before ``ANALYZE``), then ``chunk_size`` at a time."""
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
