"""What indexing identifiers' parts costs: ``formation_search_document`` (with parts) against
its previous definition (migration 0005's, without them) and bare ``to_tsvector``, interleaved,
on synthetic text.

    DATABASE_URL=postgresql://… .venv/bin/python bench/identifier_indexing.py [--rows 20000]

On a migrated database (any: it only reads functions and a temporary table), times building the
documents of ``--rows`` texts of plain words and of the same texts with five identifiers each
(a path, a signed ticket number, a snake_case call, a camelCase name and a URL), each way, in
turn (the order swapped every round), and prints the median per text and the ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

ROUNDS = 5
WORDS = "the deploy went fine after we moved the queue workers to the new hosts today"
IDENTIFIERS = (
    " see parse_query() in search_app/query/parse.py for PROJ-{n}, getUserById fails at "
    "https://api.example.com/v2/users?id={n}"
)


# Migration 0005's definition (what 0011 restores on the way back), as a temporary function:
# the document before identifier parts.
def previous_definition() -> str:
    from importlib import import_module

    restore = import_module("search_app.migrations.0011_identifier_parts").RESTORE_FUNCTIONS
    function = restore[: restore.index("$$;") + len("$$;")]
    return function.replace(
        "CREATE OR REPLACE FUNCTION formation_search_document",
        "CREATE FUNCTION pg_temp.previous_document",
    )


TEXTS = """
CREATE TEMPORARY TABLE bench_texts AS
SELECT n, %(words)s || ' ' || n AS plain,
       %(words)s || ' ' || n || replace(%(identifiers)s, '{n}', n::text) AS coded
FROM generate_series(1, %(rows)s) AS n
"""


def timed(cursor: psycopg.Cursor, function: str, column: str) -> float:
    started = time.perf_counter()
    cursor.execute(
        f"SELECT sum(length({function}('formation_english'::regconfig, {column}))) FROM bench_texts"
    )
    cursor.fetchone()
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=20_000)
    args = parser.parse_args()
    if not os.environ.get("DATABASE_URL"):
        sys.exit("Set DATABASE_URL to a migrated database.")
    with psycopg.connect(os.environ["DATABASE_URL"]) as connection, connection.cursor() as cursor:
        cursor.execute(TEXTS, {"words": WORDS, "identifiers": IDENTIFIERS, "rows": args.rows})
        cursor.execute(previous_definition())
        sides = [
            ("to_tsvector", "to_tsvector"),
            ("previous", "pg_temp.previous_document"),
            ("formation_search_document", "formation_search_document"),
        ]
        print(f"{args.rows} texts, {ROUNDS} rounds, median microseconds per text")
        print("text               to_tsvector  previous  with parts  with parts/previous")
        for column, label in (("plain", "plain words"), ("coded", "five identifiers")):
            seconds: dict[str, list[float]] = {name: [] for name, _ in sides}
            for number in range(ROUNDS + 1):
                for name, function in sides[number % 3 :] + sides[: number % 3]:
                    elapsed = timed(cursor, function, column)
                    if number:  # the first round warms the cache
                        seconds[name].append(elapsed)
            bare, previous, parts = (
                statistics.median(seconds[name]) / args.rows * 1e6 for name, _ in sides
            )
            print(f"{label:18} {bare:11.1f} {previous:9.1f} {parts:11.1f} {parts / previous:14.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
