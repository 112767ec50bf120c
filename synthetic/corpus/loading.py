"""Getting the corpus's rows into PostgreSQL: ``COPY``, one transaction per part, the seq
reservation every write makes, a generator thread running ahead, and parallel loaders."""

from __future__ import annotations

import queue
import threading
import uuid
from collections.abc import Generator, Iterator

from django.db import connection, models, transaction

from formation.sql import table
from messages_app.models import Message, MessageLineage
from messages_app.services import seqs_reserve
from synthetic.corpus.messages import Chunk, Part
from synthetic.corpus.parameters import CorpusError

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


def copy_rows(cursor, model: type[models.Model], columns: tuple[str, ...], rows: list[str]) -> None:
    """``rows`` (COPY text lines) into ``model``'s table."""
    if rows:
        with cursor.copy(f"COPY {table(model)} ({', '.join(columns)}) FROM STDIN") as copy:
            copy.write("".join(rows).encode())


def analyze(*model_classes: type[models.Model]) -> None:
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE " + ", ".join(table(model) for model in model_classes))


def load_part(part: Part) -> None:
    """One transaction on this thread's connection: the messages, their lineage, and the
    conversation counters, so the database is consistent after every commit."""
    with transaction.atomic(), connection.connection.cursor() as cursor:
        # A larger GIN pending list is merged into the trigram and search indexes in fewer,
        # larger batches: about a tenth less work for the same index contents.
        cursor.execute("SET LOCAL gin_pending_list_limit = '32MB'")
        cursor.execute("SET LOCAL work_mem = '128MB'")
        _reserve(part)
        copy_rows(cursor, Message, _MESSAGE_COLUMNS, part.messages)
        copy_rows(cursor, MessageLineage, _LINEAGE_COLUMNS, part.lineage)


def _reserve(part: Part) -> None:
    """The part's seqs, reserved as every write reserves them: they must be the ones its rows
    carry (each room's next ones, in order), or the load stops before copying a row."""
    counts = {uuid.UUID(room): (added, live) for room, (added, live, _) in part.counters.items()}
    expected = {uuid.UUID(room): first for room, (_, _, first) in part.counters.items()}
    if seqs_reserve(counts) != expected:
        raise CorpusError("The generated seqs are out of step with the conversations' counters.")


def ahead(chunks: Iterator[Chunk], depth: int = 2) -> Generator[Chunk, None, None]:
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


class Loaders:
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
                    load_part(part)
                with self._lock:
                    self.loaded += len(part.messages)
        except BaseException as problem:
            self.errors.append(problem)
            self.failed.set()
        finally:
            connection.close()  # This thread's own connection.

    def submit(self, chunk: Chunk) -> None:
        for n, inbox in enumerate(self._inboxes):
            part = Part.merge(chunk.parts[n :: self.count])
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
