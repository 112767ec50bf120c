"""What storing a long message costs by what it holds: prose, camelCase code, a Java stack
trace and file paths (synthetic/long_texts.py), at 10,000, 40,000 and 100,000 characters.

    DATABASE_URL=postgresql://… .venv/bin/python bench/storing_cost.py [--rounds 5]

On a migrated database, in one transaction rolled back at the end, it creates a workspace and,
round by
round with the order of the kinds rotated, stores one message of each kind and size through
``messages_app.services.message_create`` (the insert, its triggers and the search document
built in them), then builds the same texts' documents with ``formation_word_document`` as
this checkout defines it and as migration 0011 defined it (joined lexemes, quadratic), each
alone in a statement. It prints the medians, each kind's ratio to prose of the same length
(tests/search_app/test_storing_cost.py holds the median within 3x; the fastest stores'
ratio beside it), and after/before for the document alone. The previous definition is skipped
at 100,000 characters, where it takes minutes (``--previous-up-to``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.django_setup import setup_django

SIZES = (10_000, 40_000, 100_000)


def previous_definition() -> str:
    """Migration 0011's formation_word_document, as a temporary function."""
    from importlib import import_module

    functions = import_module("search_app.migrations.0011_identifier_parts").FUNCTIONS
    start = functions.index("CREATE OR REPLACE FUNCTION formation_word_document")
    end = functions.index("$$;", start) + len("$$;")
    return functions[start:end].replace(
        "CREATE OR REPLACE FUNCTION formation_word_document",
        "CREATE FUNCTION pg_temp.previous_word_document",
    )


def measure(rounds: int, sizes: list[int], previous_up_to: int) -> None:
    """Store and build every text, round by round, and print the table."""
    from django.db import connection
    from rest_framework.test import APIClient

    from messages_app import services
    from messages_app.models import TokenKind
    from synthetic.long_texts import KINDS, long_text

    workspace = services.workspace_create(slug=f"bench-storing-{time.time_ns()}")
    agent = services.agent_create(workspace_id=workspace.id, name="bench agent")
    room = services.conversation_create(workspace_id=workspace.id, kind="public", title="bench")
    _, token = services.token_create(workspace_id=workspace.id, kind=TokenKind.SERVICE)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    url = f"/api/v1/conversations/{room.id}/messages"
    texts = {(kind, size): long_text(kind, size) for kind in KINDS for size in sizes}
    stored: dict[tuple[str, int], list[float]] = defaultdict(list)
    built: dict[tuple[str, str, int], list[float]] = defaultdict(list)
    with connection.cursor() as cursor:
        cursor.execute(previous_definition())
    for number in range(rounds + 1):
        kinds = KINDS[number % len(KINDS) :] + KINDS[: number % len(KINDS)]
        for size in sizes:
            for kind in kinds:
                text = texts[kind, size]
                started = time.perf_counter()
                answer = api.post(
                    url, {"senderAgentId": str(agent.id), "content": text}, format="json"
                )
                elapsed = time.perf_counter() - started
                assert answer.status_code == 201, answer.status_code
                if number:  # the first round warms the caches
                    stored[kind, size].append(elapsed)
                functions = ["formation_word_document"]
                if size <= previous_up_to:
                    functions.append("pg_temp.previous_word_document")
                for function in functions[number % 2 :] + functions[: number % 2]:
                    with connection.cursor() as cursor:
                        started = time.perf_counter()
                        cursor.execute(
                            f"SELECT length({function}('formation_english', %s))", [text]
                        )
                        elapsed = time.perf_counter() - started
                    if number:
                        built[function, kind, size].append(elapsed)

    print(f"{rounds} rounds, median milliseconds")
    print(
        f"{'kind':12} {'chars':>7} {'store':>8} {'/prose':>7} {'fastest/prose':>13} "
        f"{'document':>9} {'previous':>9} {'after/before':>12}"
    )
    for size in sizes:
        prose = statistics.median(stored["prose", size])
        fastest_prose = min(stored["prose", size])
        for kind in KINDS:
            store = statistics.median(stored[kind, size])
            fastest = min(stored[kind, size]) / fastest_prose
            document = statistics.median(built["formation_word_document", kind, size])
            before = built.get(("pg_temp.previous_word_document", kind, size))
            previous = f"{statistics.median(before) * 1000:9.1f}" if before else f"{'-':>9}"
            ratio = f"{document / statistics.median(before):12.3f}" if before else f"{'-':>12}"
            print(
                f"{kind:12} {size:7} {store * 1000:8.1f} {store / prose:7.2f} {fastest:13.2f} "
                f"{document * 1000:9.1f} {previous} {ratio}"
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="measured rounds (one more warms)")
    parser.add_argument(
        "--sizes", type=int, nargs="+", default=list(SIZES), help="text lengths in characters"
    )
    parser.add_argument(
        "--previous-up-to",
        type=int,
        default=40_000,
        help="time the previous definition only up to this length (it is quadratic)",
    )
    args = parser.parse_args()
    os.environ.setdefault("ALLOWED_HOSTS", "testserver")  # the API in process
    os.environ.setdefault("LOG_LEVEL", "WARNING")  # no line per stored message
    setup_django("Set DATABASE_URL to a migrated database (nothing it writes is kept).")

    from django.db import transaction

    with transaction.atomic():
        measure(args.rounds, args.sizes, args.previous_up_to)
        transaction.set_rollback(True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
