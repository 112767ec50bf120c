"""Time bulk imports of a given shape through the API in process, to size MAX_BULK_CHARS.

    DATABASE_URL=postgresql://... python bench/bulk_import_limit.py 1000x10000 5000x2000 \
        [--repeat 3] [--lift-limit]

Each ``COUNTxCHARS`` posts COUNT messages of CHARS characters of corpus-like text (the corpus
vocabulary, Zipf-drawn) to ``POST /api/v1/conversations/{id}/messages/bulk`` under the production
statement timeout (``API_STATEMENT_TIMEOUT_MS``), inside a transaction that is rolled back, so
the database keeps nothing. Prints, per import, the status, the whole request, its longest
SQL statement (the INSERT, with the search-document trigger and the GIN indexes) and, when
PostgreSQL runs on this machine, the CPU time its backend spent, which does not depend on what
else the machine is doing.
``--lift-limit`` raises MAX_BULK_CHARS in this process, to time imports past it. Synthetic data
only; nothing here is a test.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "formation.settings")

import django

django.setup()

from django.db import connection, transaction  # noqa: E402
from django.test import Client  # noqa: E402

from messages_app import services  # noqa: E402
from messages_app.models import TokenKind  # noqa: E402
from messages_app.services import messages as message_services  # noqa: E402
from synthetic.corpus import corpus_vocabulary  # noqa: E402


def corpus_text(rng: random.Random, words: list[str], weights: list[float], chars: int) -> str:
    text = ""
    while len(text) < chars:
        text += " ".join(rng.choices(words, weights, k=2_000)) + " "
    return text[:chars]


def backend_cpu_seconds() -> float | None:
    """User and system time of this connection's PostgreSQL backend, if it is a local process."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (pid,) = cursor.fetchone()
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def import_once(
    count: int, chars: int, rng: random.Random, words, weights
) -> tuple[int, float, float, float | None]:
    """(status, request seconds, longest statement seconds, backend CPU seconds) of one
    rolled-back import."""
    contents = [corpus_text(rng, words, weights, chars) for _ in range(count)]
    longest = 0.0

    def timed(execute, sql, params, many, context):
        nonlocal longest
        started = time.monotonic()
        try:
            return execute(sql, params, many, context)
        finally:
            longest = max(longest, time.monotonic() - started)

    with transaction.atomic():
        workspace = services.workspace_create(slug=f"bulk-limit-{rng.getrandbits(48):x}")
        sender = services.account_create(workspace_id=workspace.id, display_name="Sender")
        room = services.conversation_create(workspace_id=workspace.id, kind="private", title="bulk")
        services.membership_join(conversation=room, account_id=sender.id)
        _, token = services.token_create(workspace_id=workspace.id, kind=TokenKind.SERVICE)
        body = json.dumps(
            {"messages": [{"senderUserId": str(sender.id), "content": c} for c in contents]}
        )
        client = Client(HTTP_AUTHORIZATION=f"Bearer {token}", HTTP_HOST="localhost")
        cpu_before = backend_cpu_seconds()
        started = time.monotonic()
        with connection.execute_wrapper(timed):
            response = client.post(
                f"/api/v1/conversations/{room.id}/messages/bulk",
                body,
                content_type="application/json",
            )
        elapsed = time.monotonic() - started
        cpu_after = backend_cpu_seconds()
        transaction.set_rollback(True)
    cpu = None if cpu_before is None or cpu_after is None else cpu_after - cpu_before
    return response.status_code, elapsed, longest, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shapes", nargs="+", help="COUNTxCHARS, e.g. 1000x10000")
    parser.add_argument("--repeat", type=int, default=3, help="imports per shape")
    parser.add_argument("--lift-limit", action="store_true", help="raise MAX_BULK_CHARS")
    args = parser.parse_args()
    if args.lift_limit:
        message_services.MAX_BULK_CHARS = 10**12
    words = corpus_vocabulary(0)
    weights = [1.0 / rank for rank in range(1, len(words) + 1)]
    rng = random.Random(0)
    limit = message_services.MAX_BULK_CHARS
    print(f"load average {os.getloadavg()[0]:.1f}; limit {limit:,} characters")
    for shape in args.shapes:
        count, chars = (int(part) for part in shape.split("x"))
        for _ in range(args.repeat):
            status, elapsed, longest, cpu = import_once(count, chars, rng, words, weights)
            backend = "n/a" if cpu is None else f"{cpu:5.2f} s"
            print(
                f"{count:>5} x {chars:>6} = {count * chars / 1e6:5.1f}M characters: {status}, "
                f"request {elapsed:5.2f} s, longest statement {longest:5.2f} s, "
                f"PostgreSQL CPU {backend}",
                flush=True,
            )


if __name__ == "__main__":
    main()
