"""The batch sizes of the lifecycle's long jobs (retention, account erasure, export).

Large jobs run in batches of at most ``MAX_BATCH_SIZE`` messages, each batch its own
transaction, so a crash loses at most the batch in flight and the next run carries on from what
is left: every statement only picks messages that are still live, so nothing is erased twice.
"""

from __future__ import annotations

from formation.errors import InvalidArguments

DEFAULT_BATCH_SIZE = 1_000
MAX_BATCH_SIZE = 10_000


def check_batch_size(batch_size: int) -> int:
    if not 1 <= batch_size <= MAX_BATCH_SIZE:
        raise InvalidArguments(f"The batch size must be between 1 and {MAX_BATCH_SIZE}.")
    return batch_size
