"""A 100,000-message export streams in constant memory (docs/lifecycle.md, "Export").

The messages are written by one ``INSERT ... SELECT generate_series``
(``factories.fill_messages``; the search triggers run as for any insert). The export is read
through the real view, chunk by chunk and discarded, as a client would, while ``tracemalloc``
watches every Python allocation: the peak stays a small fraction of the answer, because only
one page of rows (``DEFAULT_BATCH_SIZE``) is ever held. tests/test_streamed_answers.py measures
the same export through production gunicorn.
"""

from __future__ import annotations

import json
import tracemalloc

import pytest

from messages_app.lifecycle import DEFAULT_BATCH_SIZE
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
