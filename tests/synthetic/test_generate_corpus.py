"""generate_corpus: a small corpus has every property the million-message one relies on.

Each test loads a few thousand synthetic messages through the command (COPY, one worker, inside
the test's transaction) and checks the loaded rows with SQL, the way a benchmark would see them.
"""

from __future__ import annotations

import hashlib
import io

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection, transaction
from django.db.models import F

from messages_app.models import (
    Agent,
    Conversation,
    ConversationKind,
    IdentityLink,
    IdentityLinkStatus,
    Membership,
    Message,
    MessageLineage,
    Workspace,
)
from search_app.models import MessageSearchDocument
from synthetic.corpus import BUSY_AGENT_NAME, CorpusError, corpus_vocabulary, workspace_slug
from synthetic.corpus.loading import _reserve
from synthetic.corpus.messages import Part as _Part
from tests import factories

pytestmark = pytest.mark.django_db

SEED = 7
SIZES = {"messages": 3_000, "workspaces": 2, "conversations": 48}


def load(seed: int = SEED, **overrides: object) -> str:
    arguments = {**SIZES, "seed": seed, "chunk_size": 1_000, "workers": 1, **overrides}
    out = io.StringIO()
    options = [f"--{name.replace('_', '-')}={value}" for name, value in arguments.items()]
    call_command("generate_corpus", *options, stdout=out)
    return out.getvalue()


def printed_digest(output: str) -> str:
    (line,) = [line for line in output.splitlines() if line.startswith("Content digest: ")]
    return line.removeprefix("Content digest: ")


# Every row the corpus writes, in a fixed order (lineage and documents by their natural keys).
DIGEST_QUERIES = [
    "SELECT id, slug, name, created_at FROM messages_app_workspace WHERE id = ANY(%(ws)s)",
    "SELECT * FROM messages_app_account WHERE workspace_id = ANY(%(ws)s) ORDER BY id",
    "SELECT * FROM messages_app_agent WHERE workspace_id = ANY(%(ws)s) ORDER BY id",
    "SELECT * FROM messages_app_conversation WHERE workspace_id = ANY(%(ws)s) ORDER BY id",
    "SELECT * FROM messages_app_membership WHERE workspace_id = ANY(%(ws)s) ORDER BY id",
    "SELECT * FROM messages_app_identitylink WHERE workspace_id = ANY(%(ws)s) ORDER BY id",
    "SELECT * FROM messages_app_message WHERE workspace_id = ANY(%(ws)s) ORDER BY id",
    "SELECT message_id, source_id, direct FROM messages_app_messagelineage "
    "WHERE workspace_id = ANY(%(ws)s) ORDER BY message_id, source_id",
    "SELECT message_id, document::text FROM message_search_documents "
    "WHERE workspace_id = ANY(%(ws)s) ORDER BY message_id",
]


def database_digest(seed: int = SEED) -> str:
    slugs = [workspace_slug(seed, w) for w in range(SIZES["workspaces"])]
    workspaces = list(Workspace.objects.filter(slug__in=slugs).values_list("id", flat=True))
    digest = hashlib.sha256()
    with connection.cursor() as cursor:
        for query in DIGEST_QUERIES:
            cursor.execute(query, {"ws": workspaces})
            for row in cursor.fetchall():
                digest.update(repr(row).encode())
    return digest.hexdigest()


def scalar(sql: str) -> object:
    with connection.cursor() as cursor:
        cursor.execute(sql)
        return cursor.fetchone()[0]


class Discard(Exception):
    """Rolls a load back inside the test's transaction."""


def load_and_discard() -> tuple[str, str]:
    """Load, take the printed and the database digests, and roll the load back."""
    try:
        with transaction.atomic():
            digests = (printed_digest(load()), database_digest())
            raise Discard
    except Discard:
        return digests


def test_the_same_seed_loads_the_same_corpus_and_another_seed_does_not():
    first_printed, first = load_and_discard()
    assert not Workspace.objects.exists()
    assert printed_digest(load()) == first_printed
    assert database_digest() == first
    assert printed_digest(load(seed=SEED + 1)) != first_printed
    assert database_digest(SEED + 1) != first


def test_the_vocabulary_is_large_synthetic_and_fixed_by_the_seed():
    words = corpus_vocabulary(SEED)
    assert len(words) >= 20_000
    assert len(set(words)) == len(words)
    assert words == corpus_vocabulary(SEED)
    assert words != corpus_vocabulary(SEED + 1)
    # Every word survives full-text search: none is a stop word.
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM unnest(%s::text[]) AS w "
            "WHERE to_tsvector('formation_english', w) = ''::tsvector",
            [words],
        )
        assert cursor.fetchone()[0] == 0


def test_the_corpus_covers_the_domain():
    output = load()
    slugs = [workspace_slug(SEED, w) for w in range(SIZES["workspaces"])]
    assert Workspace.objects.filter(slug__in=slugs).count() == 2
    for workspace in Workspace.objects.filter(slug__in=slugs):
        kinds = set(workspace.conversations.values_list("kind", flat=True))
        assert kinds == set(ConversationKind.values)
    assert set(IdentityLink.objects.values_list("status", flat=True)) == set(
        IdentityLinkStatus.values
    )
    assert Membership.objects.filter(left_at__isnull=False).exists()
    assert Membership.objects.filter(left_at__isnull=True).exists()
    # Unknown rooms were imported without their people: no human is on record there.
    assert not Membership.objects.filter(
        conversation__kind=ConversationKind.UNKNOWN, account__isnull=False
    ).exists()
    # Direct rooms: exactly one person.
    for room in Conversation.objects.filter(kind=ConversationKind.DIRECT):
        assert room.memberships.filter(account__isnull=False).count() == 1
    roles = set(Message.objects.values_list("role", flat=True))
    assert roles == {"user", "assistant", "tool", "system"}
    assert Message.objects.filter(reply_to__isnull=False).exists()
    assert Message.objects.filter(thread__isnull=False).exists()
    assert not Message.objects.filter(thread__thread__isnull=False).exists()

    busy = Agent.objects.get(name=BUSY_AGENT_NAME)
    assert busy.workspace.slug == workspace_slug(SEED, 0)
    rooms_of_first_workspace = SIZES["conversations"] // SIZES["workspaces"]
    assert busy.memberships.values("conversation").distinct().count() == rooms_of_first_workspace
    assert str(busy.id) in output
    token = output.strip().splitlines()[-1]
    assert token.startswith("fmn_agent_")


def test_about_two_percent_are_deleted_the_way_message_delete_leaves_them():
    load()
    total = Message.objects.count()
    deleted = Message.objects.filter(deleted_at__isnull=False)
    assert total == SIZES["messages"]
    assert 0.01 * total <= deleted.count() <= 0.03 * total
    assert not deleted.exclude(content="").exists()
    assert not deleted.filter(edited_at__isnull=False).exists()
    assert not deleted.filter(deleted_at__lt=F("created_at")).exists()
    assert not MessageSearchDocument.objects.filter(message__deleted_at__isnull=False).exists()
    live = Message.objects.filter(deleted_at__isnull=True)
    assert MessageSearchDocument.objects.count() == live.count()
    assert not live.filter(content="").exists()


def test_lineage_rows_are_the_exact_transitive_closure():
    load()
    lineage = MessageLineage.objects
    assert lineage.filter(direct=True).exists()
    assert lineage.filter(direct=False).exists()
    # Closed: a source's own sources are sources of the message too.
    assert not scalar(
        """SELECT count(*) FROM messages_app_messagelineage AS l
           JOIN messages_app_messagelineage AS inherited ON inherited.message_id = l.source_id
           WHERE NOT EXISTS (SELECT 1 FROM messages_app_messagelineage AS x
                             WHERE x.message_id = l.message_id
                               AND x.source_id = inherited.source_id)"""
    )
    # Exact: every inherited row comes from some direct source, and no direct source is
    # repeated as inherited (the unique key).
    assert not scalar(
        """SELECT count(*) FROM messages_app_messagelineage AS l
           WHERE NOT l.direct AND NOT EXISTS (
               SELECT 1 FROM messages_app_messagelineage AS d
               JOIN messages_app_messagelineage AS s ON s.message_id = d.source_id
               WHERE d.message_id = l.message_id AND d.direct AND s.source_id = l.source_id)"""
    )
    # Sources came first, in the same workspace, and only agents' replies carry lineage.
    assert not scalar(
        """SELECT count(*) FROM messages_app_messagelineage AS l
           JOIN messages_app_message AS m ON m.id = l.message_id
           JOIN messages_app_message AS s ON s.id = l.source_id
           WHERE s.created_at > m.created_at OR s.workspace_id <> m.workspace_id
              OR m.sender_agent_id IS NULL"""
    )
    # Some closures are more than one level deep.
    assert scalar("SELECT count(*) FROM messages_app_messagelineage WHERE NOT direct") > 0


def test_seq_is_contiguous_follows_time_and_matches_the_counters():
    load()
    with connection.cursor() as cursor:
        cursor.execute(
            """SELECT c.last_seq, c.live_message_count, count(m.id), coalesce(min(m.seq), 1),
                      coalesce(max(m.seq), 0), count(m.id) FILTER (WHERE m.deleted_at IS NULL)
               FROM messages_app_conversation AS c
               LEFT JOIN messages_app_message AS m ON m.conversation_id = c.id
               GROUP BY c.workspace_id, c.id"""
        )
        rooms = cursor.fetchall()
    assert len(rooms) == SIZES["conversations"]
    for last_seq, live_count, messages, low, high, live in rooms:
        assert (low, high, messages) == (1, last_seq, last_seq)
        assert live_count == live
    assert sum(room[2] for room in rooms) == SIZES["messages"]
    assert not scalar(
        """SELECT count(*) FROM (
               SELECT created_at < lag(created_at) OVER w AS backwards
               FROM messages_app_message WINDOW w AS (PARTITION BY conversation_id ORDER BY seq)
           ) AS ordered WHERE backwards"""
    )


def test_rebuild_search_documents_finds_nothing_to_fix_after_a_load():
    load()
    out = io.StringIO()
    call_command("rebuild_search_documents", "--check", stdout=out)  # Raises on drift.
    assert "0 rows drifted" in out.getvalue()


@pytest.mark.parametrize(
    "arguments",
    [
        ["--messages", "0"],
        ["--messages", "lots"],
        ["--workspaces", "0"],
        ["--workspaces", "3", "--conversations", "11"],
        ["--conversations", "3"],
        ["--seed", "-1"],
        ["--chunk-size", "10"],
        ["--workers", "0"],
        ["--workers", "2"],  # Other connections cannot see the test's transaction.
        ["--unknown-option", "1"],
    ],
)
def test_bad_arguments_are_command_errors(arguments):
    with pytest.raises(CommandError):
        call_command("generate_corpus", "--messages", "100", *arguments, stdout=io.StringIO())
    assert not Workspace.objects.exists()


def test_a_seed_already_loaded_is_refused():
    load(messages=200)
    with pytest.raises(CommandError, match="already loaded"):
        load(messages=200)
    assert Message.objects.count() == 200


@pytest.mark.django_db(transaction=True)
def test_parallel_workers_load_the_same_rows_as_one():
    load(workers=2)
    parallel = database_digest()
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE messages_app_workspace CASCADE")
    load(workers=1)
    assert database_digest() == parallel


def test_seqs_out_of_step_with_the_counters_stop_the_load():
    """The corpus reserves its seqs through the services' own reservation; rows whose seqs do
    not follow the conversation's counter are refused before any is copied."""
    workspace = factories.make_workspace()
    conversation = factories.make_conversation(workspace, "public")
    factories.post(conversation, factories.make_account(workspace), "sample first")
    behind = _Part(counters={str(conversation.id): [2, 2, 1]})
    with pytest.raises(CorpusError, match="out of step"), transaction.atomic():
        _reserve(behind)
    conversation.refresh_from_db()
    assert (conversation.last_seq, conversation.live_message_count) == (1, 1)

    _reserve(_Part(counters={str(conversation.id): [2, 1, 2]}))
    conversation.refresh_from_db()
    assert (conversation.last_seq, conversation.live_message_count) == (3, 2)
