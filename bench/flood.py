"""search_history beside floods (issue 35): what the agent may not see must not slow its
searches or change their answers, and a busy room's noise must not push a rarer term out.

On a corpus made by ``manage.py generate_corpus`` (the busy agent of bench/benchmark.py's
scene), in one run:

1. **Withheld flood.** ``--messages`` messages holding the common band's words, in a public
   room of the agent's workspace that it never joined, all newer than anything it may see.
2. **Eligible noise.** As many messages holding only the common words, in the agent's busiest
   room, newer than everything; the query pairs a rare word with them.

Each phase times the same calls before the messages exist, with them, and after they are gone
again (``before`` is the median of both sides, so a drift of the machine shows as a gap
between them), the calls of one round interleaved, through the service function (the
statement, its parse and the answer: what an endpoint adds is the same either side). It
checks that the withheld flood changes no hit, order or score, and that every rare-word hit
the pair query found before the noise is still found with it. The messages (and the bench's
evidence rows that name them) are deleted at the end, whatever happens, by conversation. Every
search is a fresh run, so the evidence budget never interferes.

    DATABASE_URL=... .venv/bin/python bench/flood.py --seed 1 [--messages 100000] [--rounds 15]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.django_setup import setup_django

setup_django("Set DATABASE_URL to the corpus's database (bench/flood.py writes and deletes).")

from django.db import connection, transaction  # noqa: E402
from django.db.models import Max  # noqa: E402
from django.utils import timezone  # noqa: E402

from formation.sql import table  # noqa: E402
from messages_app.models import (  # noqa: E402
    Account,
    Conversation,
    ConversationKind,
    Membership,
    Message,
    RunEvidence,
    Workspace,
)
from messages_app.services import conversation_create  # noqa: E402
from search_app.history import terms  # noqa: E402
from search_app.history.results import HistoryFilters  # noqa: E402
from search_app.models import MessageSearchDocument  # noqa: E402
from search_app.runs.services import run_create  # noqa: E402
from search_app.services import search_history  # noqa: E402
from synthetic.corpus import BUSY_AGENT_NAME, corpus_vocabulary, workspace_slug  # noqa: E402

# The bands of bench/benchmark.py (ranks in the corpus vocabulary); the rare word is the first
# of these the agent has hits for.
COMMON_RANKS = (2, 3, 5)
RARE_RANKS = (15_000, 12_000, 9_000, 3_000, 1_000, 300)


class Searcher:
    """Fresh runs of the busy agent in its private room, asking for its current reader."""

    def __init__(self, workspace: Workspace) -> None:
        from messages_app.models import Agent

        self.workspace = workspace
        # One moment for every call, so that recency scores the same before and with a flood.
        self.now = timezone.now()
        self.agent = Agent.objects.get(workspace=workspace, name=BUSY_AGENT_NAME)
        rooms = Membership.objects.filter(agent=self.agent, left_at__isnull=True)
        self.rooms = Conversation.objects.filter(id__in=rooms.values("conversation_id"))
        private = self.rooms.filter(kind=ConversationKind.PRIVATE).order_by("-live_message_count")
        for room in private:
            reader = room.memberships.filter(account__isnull=False, left_at__isnull=True).first()
            if reader is not None:
                self.destination, self.requester_id = room, reader.account_id
                break
        else:
            sys.exit("The busy agent has no private room with a current reader.")

    def answer(self, text: str) -> tuple[float, list[tuple]]:
        run, _ = run_create(
            workspace_id=self.workspace.id,
            agent_id=self.agent.id,
            conversation_id=self.destination.id,
            requester_id=self.requester_id,
        )
        started = time.perf_counter()
        found = search_history(
            workspace_id=self.workspace.id,
            run_id=run.id,
            query_text=text,
            filters=HistoryFilters(),
            limit=20,
            now=self.now,
        )
        elapsed = (time.perf_counter() - started) * 1000
        hits = [
            (
                hit.message.id,
                round(hit.score, 9),
                tuple(m.id for m in (*hit.before, *hit.after)),
            )
            for hit in found.hits
        ]
        return elapsed, hits


def rounds(searcher: Searcher, queries: list[str], count: int) -> dict[str, list[float]]:
    """``count`` rounds of every query, one after the other (two warm-up rounds first)."""
    times: dict[str, list[float]] = {query: [] for query in queries}
    for index in range(count + 2):
        for query in queries:
            elapsed, _ = searcher.answer(query)
            if index >= 2:
                times[query].append(elapsed)
    return times


def insert_messages(conversation: Conversation, sender: Account, count: int, words: str) -> None:
    """``count`` messages holding ``words``, a second apart, after the workspace's newest."""
    newest = Message.objects.filter(workspace_id=conversation.workspace_id).aggregate(
        newest=Max("created_at")
    )["newest"]
    start = newest + timedelta(seconds=1)
    first_seq = (
        Message.objects.filter(conversation=conversation).aggregate(seq=Max("seq"))["seq"] or 0
    ) + 1
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"""INSERT INTO {table(Message)}
                    (id, workspace_id, conversation_id, seq, role, status, sender_account_id,
                     content, created_at)
                SELECT gen_random_uuid(), %s, %s, %s + n, 'user', 'sent', %s,
                       %s || ' flood ' || n, %s::timestamptz + n * interval '1 second'
                FROM generate_series(0, %s - 1) AS n""",
            [
                conversation.workspace_id,
                conversation.id,
                first_seq,
                sender.id,
                words,
                start,
                count,
            ],
        )
    analyze()


def analyze() -> None:
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {table(Message)}")
        cursor.execute(f"ANALYZE {table(MessageSearchDocument)}")
    terms.forget_frequencies()


# Messages are never hard-deleted by the product, so nothing indexes the replies' and threads'
# own foreign keys (messages_app/models/messages.py). Deleting a message checks both: each
# check reads the room's every message through the (workspace, conversation, …) indexes, and
# 100,000 of them in a room of 100,000 is 10^10 rows read (a clean-up that did not finish). The
# clean-up builds these two partial indexes for the time it deletes (the replies and threads
# are a few percent of the messages) and drops them again.
CLEANUP_INDEXES = {
    "bench_flood_cleanup_reply": "reply_to_id",
    "bench_flood_cleanup_thread": "thread_id",
}
CLEANUP_BATCH = 10_000


def delete_messages(conversation: Conversation, since: int) -> None:
    """The room's messages from seq ``since`` on, with their documents and the bench's evidence,
    by conversation, ``CLEANUP_BATCH`` messages per transaction, newest first."""
    started = time.perf_counter()
    messages = table(Message)
    with connection.cursor() as cursor:
        for name, column in CLEANUP_INDEXES.items():
            cursor.execute(
                f"CREATE INDEX IF NOT EXISTS {name} ON {messages}"
                f" (workspace_id, conversation_id, {column}) WHERE {column} IS NOT NULL"
            )
    try:
        scope = [conversation.workspace_id, conversation.id]
        while True:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(
                    f"""SELECT min(seq) FROM (
                            SELECT seq FROM {messages}
                            WHERE workspace_id = %s AND conversation_id = %s AND seq >= %s
                            ORDER BY seq DESC LIMIT %s) AS batch""",
                    [*scope, since, CLEANUP_BATCH],
                )
                low = cursor.fetchone()[0]
                if low is None:
                    break
                batch = f"""SELECT id FROM {messages}
                            WHERE workspace_id = %s AND conversation_id = %s AND seq >= %s"""
                for model in (RunEvidence, MessageSearchDocument):
                    cursor.execute(
                        f"""DELETE FROM {table(model)}
                            WHERE workspace_id = %s AND message_id IN ({batch})""",
                        [conversation.workspace_id, *scope, low],
                    )
                cursor.execute(
                    f"""DELETE FROM {messages}
                        WHERE workspace_id = %s AND conversation_id = %s AND seq >= %s""",
                    [*scope, low],
                )
    finally:
        with connection.cursor() as cursor:
            for name in CLEANUP_INDEXES:
                cursor.execute(f"DROP INDEX IF EXISTS {name}")
    analyze()
    print(f"clean-up: {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)


def median(values: list[float]) -> float:
    return statistics.median(values)


def phase(
    name: str,
    searcher: Searcher,
    queries: list[str],
    count: int,
    flood: Callable[[], Callable[[], None]],
) -> dict[str, object]:
    """Time ``queries`` before, with and after what ``flood`` inserts (it returns the undo),
    and the answers before and with it."""
    before_answers = {query: searcher.answer(query)[1] for query in queries}
    before = rounds(searcher, queries, count)
    undo = flood()
    try:
        with_answers = {query: searcher.answer(query)[1] for query in queries}
        during = rounds(searcher, queries, count)
    finally:
        undo()
    after = rounds(searcher, queries, count)
    rows = []
    for query in queries:
        base = median(before[query] + after[query])
        rows.append(
            {
                "query": query,
                "before": median(before[query]),
                "after": median(after[query]),
                "with": median(during[query]),
                "ratio": median(during[query]) / base,
            }
        )
    return {"name": name, "rows": rows, "before": before_answers, "with": with_answers}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()

    words = corpus_vocabulary(args.seed)
    common = [words[rank - 1] for rank in COMMON_RANKS]
    workspace = Workspace.objects.get(slug=workspace_slug(args.seed, 0))
    searcher = Searcher(workspace)
    rare = next(
        (words[rank - 1] for rank in RARE_RANKS if searcher.answer(words[rank - 1])[1]), None
    )
    if rare is None:
        sys.exit("The busy agent has no hits for any of the rare words.")
    sender = Account.objects.filter(workspace=workspace).order_by("id").first()
    common_query = " ".join(common)

    def withheld() -> Callable[[], None]:
        room = conversation_create(
            workspace_id=workspace.id, kind=ConversationKind.PUBLIC, title=f"flood {uuid.uuid4()}"
        )
        insert_messages(room, sender, args.messages, common_query)

        def undo() -> None:
            delete_messages(room, 0)
            room.delete()

        return undo

    busiest = searcher.rooms.order_by("-live_message_count", "id").first()

    def noise() -> Callable[[], None]:
        since = (Message.objects.filter(conversation=busiest).aggregate(s=Max("seq"))["s"]) + 1
        insert_messages(busiest, sender, args.messages, common_query)
        return lambda: delete_messages(busiest, since)

    flood = phase("withheld flood", searcher, [common[0], common_query], args.rounds, withheld)
    pair = f"{rare} {common[0]}"
    noisy = phase("eligible noise", searcher, [rare, pair], args.rounds, noise)

    print(f"# bench/flood.py: {args.messages:,} messages, {args.rounds} rounds, seed {args.seed}")
    print(f"database {connection.settings_dict['NAME']}\n")
    print("| phase | query | p50 before | p50 with | p50 after | with / before |")
    print("|---|---|--:|--:|--:|--:|")
    for result in (flood, noisy):
        for row in result["rows"]:
            print(
                f"| {result['name']} | {row['query']} | {row['before']:.1f} | {row['with']:.1f}"
                f" | {row['after']:.1f} | {row['ratio']:.2f}x |"
            )
    unchanged = all(flood["before"][query] == flood["with"][query] for query in flood["before"])
    print(f"\nwithheld flood: every hit, order, score and neighbour unchanged: {unchanged}")
    # The rare word's hits that the pair finds without the noise (once the rare word has a page
    # of hits, an older common-word message can outrank one of them with or without noise).
    rare_before = {hit[0] for hit in noisy["before"][rare]}
    pair_before = rare_before & {hit[0] for hit in noisy["before"][pair]}
    kept = len(pair_before & {hit[0] for hit in noisy["with"][pair]})
    print(
        f"eligible noise: of the rare word's {len(rare_before)} hits, '{pair}' finds"
        f" {len(pair_before)} without the noise and {kept} of those with it"
    )
    if not unchanged or kept < len(pair_before):
        sys.exit(1)


if __name__ == "__main__":
    main()
