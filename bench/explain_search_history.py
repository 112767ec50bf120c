"""Time search_history on the corpus of ``bench/search_corpus.sql`` and show its plan.

    DATABASE_URL=postgresql://... DEBUG=1 python bench/explain_search_history.py \
        [--destination public|private|direct] [--band rare|mid|common] [--repeat 15] [--explain]

Prints the median and p95 of the whole service call (ranking, neighbours, highlights, evidence)
for each term band, and with ``--explain`` the ``EXPLAIN (ANALYZE, BUFFERS)`` of the hit query.
Synthetic data only; nothing here is a test.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "formation.settings")

import django

django.setup()

from django.db import connection  # noqa: E402
from django.utils import timezone  # noqa: E402

from messages_app.models import Conversation, Message  # noqa: E402
from search_app import services  # noqa: E402
from search_app.history.results import HistoryFilters  # noqa: E402
from search_app.history.statement import hits_statement  # noqa: E402
from search_app.query.parse import parse_query  # noqa: E402
from search_app.runs.services import run_create  # noqa: E402
from search_app.scope import Perspective  # noqa: E402

AGENT = uuid.UUID("00000000-0000-0000-0000-0000000000ab")
# Conversation numbers of the corpus: 5 is public, 1 private, 3 direct (person 4's).
DESTINATIONS = {"public": 5, "private": 1, "direct": 3}
# Word ranks in the Zipf-like vocabulary: high ranks are rare.
BANDS = {"rare": (15000, 12000, 9000), "mid": (300, 250, 200), "common": (2, 3, 5)}


def md5_uuid(text: str) -> uuid.UUID:
    return uuid.UUID(hashlib.md5(text.encode()).hexdigest())


def word(rank: int) -> str:
    digest = hashlib.md5(f"w{rank}".encode()).hexdigest()[: 4 + rank % 6]
    return digest.translate(str.maketrans("0123456789", "ghijklmnop"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--destination", choices=DESTINATIONS, default="public")
    parser.add_argument("--band", choices=BANDS, action="append")
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--explain", action="store_true")
    args = parser.parse_args()

    destination = Conversation.objects.get(pk=md5_uuid(f"conv{DESTINATIONS[args.destination]}"))
    requester = (
        destination.memberships.filter(account__isnull=False, left_at__isnull=True)
        .order_by("account_id")
        .values_list("account_id", flat=True)
        .first()
    )
    run, _ = run_create(
        workspace_id=destination.workspace_id,
        agent_id=AGENT,
        conversation_id=destination.id,
        requester_id=requester,
    )
    messages = Message.objects.filter(workspace_id=destination.workspace_id).count()
    print(f"destination {args.destination}, {messages} messages in the workspace")
    for band in args.band or list(BANDS):
        query_text = " ".join(word(rank) for rank in BANDS[band])
        query = parse_query(query_text)
        timings = []
        for _ in range(args.repeat):
            started = time.perf_counter()
            result = services.search_history(
                workspace_id=run.workspace_id,
                run_id=run.id,
                query_text=query_text,
                filters=HistoryFilters(),
                limit=20,
            )
            timings.append((time.perf_counter() - started) * 1000)
        timings.sort()
        p95 = timings[max(0, round(0.95 * len(timings)) - 1)]
        print(
            f"{band:7} hits={len(result.hits):2}  "
            f"p50={statistics.median(timings):7.1f} ms  p95={p95:7.1f} ms"
        )
        if args.explain:
            sql, params = hits_statement(
                Perspective.of_run(run), query, HistoryFilters(), limit=20, now=timezone.now()
            )
            with connection.cursor() as cursor:
                cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, params)
                print("\n".join(row[0] for row in cursor.fetchall()))


if __name__ == "__main__":
    main()
