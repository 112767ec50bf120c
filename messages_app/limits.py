"""Every bound the conversations' endpoints, tools and jobs hold a caller to, in one place.

The serializers, the services and the lifecycle's jobs enforce them where the input arrives;
SPEC §5 and docs/api.md state them to clients. The figures behind the bulk import's bounds are
in docs/api.md ("Bulk import limits"), measured by ``bench/bulk_import_limit.py``.
"""

from __future__ import annotations

from datetime import timedelta

from formation.errors import InvalidArguments

MAX_CONTENT_CHARS = 100_000
MAX_NAME_CHARS = 200
MAX_QUERY_CHARS = 500
# A message stamped further in the future than this would sort above everything said later.
MAX_CLOCK_SKEW = timedelta(minutes=5)
# One bulk import: its messages, and the characters they store in all. Its cost grows with the
# characters whatever the batch's shape (the search document, trigrams for literal search), and
# the request holds a worker and a connection for all of it.
MAX_BULK_MESSAGES = 5_000
MAX_BULK_CHARS = 5_000_000
# A batch is stored by INSERTs of at most this many characters of content each, in one
# transaction: each is its own statement under API_STATEMENT_TIMEOUT_MS, so an import at
# MAX_BULK_CHARS stays far inside the timeout on a busy machine (docs/api.md, "Bulk import
# limits"). Every INSERT but the last holds more than this less MAX_CONTENT_CHARS, so an import
# at MAX_BULK_CHARS takes at most 13 of them.
BULK_STATEMENT_CHARS = 500_000
MAX_LINEAGE = 1_000
# Lineage rows one request may add in all (a bulk of 5,000 agent replies, 4 sources each).
MAX_LINEAGE_PER_REQUEST = 20_000
MAX_RECENT_MESSAGES = 1_000
# The longest retention period a workspace or conversation may set (about a century).
MAX_RETENTION_DAYS = 36_500
# The lifecycle's long jobs (retention, account erasure, export) run in batches of at most
# MAX_BATCH_SIZE messages, each batch its own transaction, so a crash loses at most the batch in
# flight and the next run carries on from what is left: every statement only picks messages
# that are still live, so nothing is erased twice.
DEFAULT_BATCH_SIZE = 1_000
MAX_BATCH_SIZE = 10_000


def check_batch_size(batch_size: int) -> int:
    if not 1 <= batch_size <= MAX_BATCH_SIZE:
        raise InvalidArguments(f"The batch size must be between 1 and {MAX_BATCH_SIZE}.")
    return batch_size
