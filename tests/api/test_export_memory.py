"""A 100,000-message export streams in constant memory (docs/lifecycle.md, "Export").

The messages are written by one ``INSERT ... SELECT generate_series``
(``factories.fill_messages``; the search triggers run as for any insert). The export is read
through the real view, chunk by chunk and discarded, as a client would, while ``tracemalloc``
watches every Python allocation: the peak stays a small fraction of the answer, because only
one page of rows (``DEFAULT_BATCH_SIZE``) is ever held. tests/test_streamed_answers.py measures
the same export through production gunicorn. Pages are bounded in bytes too (``PAGE_BYTES``):
an export of a few hundred messages of the largest size is checked page by page.
"""

from __future__ import annotations

import asyncio
import json
import tracemalloc

import pytest
from django.db import connection

from formation.serving import Answer, ServingLimits
from messages_app.lifecycle import exports
from messages_app.lifecycle.exports import PAGE_BYTES
from messages_app.limits import DEFAULT_BATCH_SIZE, MAX_CONTENT_CHARS
from messages_app.models import Conversation, Message
from tests import factories

pytestmark = pytest.mark.django_db

MESSAGES = 100_000
# Measured: a peak of 2.2 MiB for 100,000 messages (a 34 MiB answer); the bound leaves room
# for another allocator or page size, not for holding the answer (or a tenth of it).
PEAK_BOUND = 8 * 1024 * 1024


def test_an_export_of_100000_messages_streams_in_constant_memory(world):
    factories.fill_messages(world.private, world.alice.id, MESSAGES)
    response = world.service.get(f"/api/v1/conversations/{world.private.id}/export")
    assert response.status_code == 200

    tracemalloc.start()
    try:
        size = lines = 0
        first = last = b""
        for chunk in response.streaming_content:
            size += len(chunk)
            lines += chunk.count(b"\n")
            first = first or chunk[: chunk.index(b"\n")]
            last = chunk[chunk.rindex(b"\n", 0, len(chunk) - 1) + 1 :]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert lines == MESSAGES
    assert (json.loads(first)["seq"], json.loads(last)["seq"]) == (1, MESSAGES)
    assert size > 4 * PEAK_BOUND  # the answer is far larger than the bound
    assert peak < PEAK_BOUND, f"peak {peak / 2**20:.1f} MiB for {size / 2**20:.1f} MiB"
    print(
        f"export of {MESSAGES} messages: {size / 2**20:.1f} MiB streamed, peak "
        f"{peak / 2**20:.2f} MiB traced (pages of {DEFAULT_BATCH_SIZE})"
    )


LARGE = 300
LARGE_PEAK_BOUND = 8 * 1024 * 1024


def fill_large_messages(conversation: Conversation, sender_id: object, count: int) -> None:
    """``count`` messages of the largest size a message may have (100,000 characters), in one
    statement: 30 MB of text for 300, which pages of 1,000 rows would hold whole."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"""INSERT INTO {Message._meta.db_table}
                    (id, workspace_id, conversation_id, seq, role, status,
                     sender_account_id, content, created_at)
                SELECT gen_random_uuid(), %s, %s, n, 'user', 'sent', %s,
                       left(n || ' ' || repeat('sample words of a long message ', 4000), %s),
                       %s::timestamptz + n * interval '1 second'
                FROM generate_series(1, %s) AS n""",
            [
                conversation.workspace_id,
                conversation.id,
                sender_id,
                MAX_CONTENT_CHARS,
                factories.T0,
                count,
            ],
        )
    Conversation.objects.filter(pk=conversation.pk).update(last_seq=count, live_message_count=count)


def page_bytes(page: list) -> int:
    return sum(len(row.content.encode()) for row in page)


def streamed(chunks: list[bytes]) -> tuple[bool, int]:
    """Whether the production worker's ``Answer`` streams these pieces (an export has no
    Content-Length), and the most it ever held collected before it started."""
    limits = ServingLimits.from_settings(threads=4)
    written = []

    async def client_send(message: dict) -> None:
        written.append(message)

    async def serve() -> tuple[bool, int]:
        answer = Answer(limits, {"extensions": {}}, client_send)
        await answer.send({"type": "http.response.start", "status": 200, "headers": []})
        held = 0
        try:
            for chunk in chunks:
                await answer.send({"type": "http.response.body", "body": chunk, "more_body": True})
                if not answer.streamed:
                    held = answer.size
            return answer.streamed, held
        finally:
            answer.end()

    return asyncio.run(serve())


def test_an_export_of_large_messages_is_paged_by_bytes_and_streamed(world):
    """300 messages of 100,000 characters: every page holds at most ``PAGE_BYTES`` of text (a
    message is at most 400,000 bytes, so no single message passes it), pages follow each other
    until the last row, and through the view the export comes in pieces the worker streams."""
    fill_large_messages(world.private, world.alice.id, LARGE)

    pages = list(
        exports.conversation_export_batches(
            workspace_id=world.workspace.id, conversation_id=world.private.id
        )
    )
    sizes = [page_bytes(page) for page in pages]
    assert [row.seq for page in pages for row in page] == list(range(1, LARGE + 1))
    assert max(sizes) <= PAGE_BYTES
    assert len(pages) == LARGE // (PAGE_BYTES // MAX_CONTENT_CHARS)  # ten messages a page
    by_account = exports.account_export_batches(
        workspace_id=world.workspace.id, account_id=world.alice.id
    )
    assert [page_bytes(page) for page in by_account] == sizes
    # A message larger than the bound is a page of its own.
    alone = exports.conversation_export_batches(
        workspace_id=world.workspace.id, conversation_id=world.private.id, page_bytes=1_000
    )
    assert [len(page) for page in alone] == [1] * LARGE

    response = world.service.get(f"/api/v1/conversations/{world.private.id}/export")
    assert response.status_code == 200
    tracemalloc.start()
    try:
        chunks = []
        for chunk in response.streaming_content:
            chunks.append(len(chunk))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(chunks) == len(pages)
    assert max(chunks) <= PAGE_BYTES + 1_000 * (LARGE // len(pages))  # text and JSON framing
    assert peak < LARGE_PEAK_BOUND, f"peak {peak / 2**20:.1f} MiB for {sum(chunks) / 2**20:.1f} MiB"
    print(
        f"export of {LARGE} messages of {MAX_CONTENT_CHARS} characters: "
        f"{sum(chunks) / 2**20:.1f} MiB in {len(chunks)} pieces of at most "
        f"{max(chunks) / 2**20:.2f} MiB, peak {peak / 2**20:.2f} MiB traced"
    )

    pieces = [b"x" * size for size in chunks]
    is_streamed, held = streamed(pieces)
    assert is_streamed
    assert held <= 2 * max(chunks)  # at most the pieces before the threshold, never the whole
