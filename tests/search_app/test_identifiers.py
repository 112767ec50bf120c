"""Identifiers as people type them in search_history: the parts of paths, hosts, e-mail
addresses, signed numbers and camelCase words are found (docs/search.md, "Identifiers").

Documents carry each identifier's parts at its own position with weight C
(``formation_word_document``); a query's words are read without parts, so an identifier typed
whole is matched whole and ranks above a message where the typed word is only a part. All text
is synthetic.
"""

from __future__ import annotations

from importlib import import_module

import pytest
from django.db import connection

from search_app.history import ranking
from search_app.query.parse import parse_query
from tests import factories
from tests.factories import at

pytestmark = pytest.mark.django_db

NOW = at(30 * 24 * 60)

BUG = "the bug is in parse_query() inside search_app/query/parse.py, see PROJ-1234"
DEPLOY = "deploy failed: ConnectionResetError at https://api.example.com/v2/users?id=42"
SETTINGS = "set MAX_RETRIES=5 in settings.py and rerun make test-citus"
CAMEL = "we use camelCase names like getUserById in the TS client"


@pytest.fixture
def room(db):
    return factories.joined_room(factories.make_workspace("ids"), "Alice Example", "Bob Example")


def say(room, text: str, minute: float = 0):
    return factories.post_apart(room, room.people[1], text, created_at=at(minute))


def search(room, query: str):
    return factories.room_history(room, query, NOW)


def found(result) -> list:
    return [hit.message.id for hit in result.hits]


def words_at(text: str, spans: list[list[int]]) -> list[str]:
    return [text[start : start + length] for start, length in spans]


def document_of(message) -> str:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT document::text FROM message_search_documents WHERE message_id = %s",
            [message.id],
        )
        return cursor.fetchone()[0]


@pytest.mark.parametrize(
    ("text", "query"),
    [
        # The table: each of these finds its message.
        (BUG, "parse_query"),
        (BUG, "PROJ-1234"),
        (BUG, "parse.py"),
        (BUG, "1234"),
        (DEPLOY, "ConnectionResetError"),
        (DEPLOY, "api.example.com"),
        (SETTINGS, "MAX_RETRIES"),
        (SETTINGS, "settings.py"),
        (SETTINGS, "test-citus"),
        (CAMEL, "getUserById"),
        # A file name and a directory inside a path, and the path typed whole.
        ("logs are in /var/log/nginx/error.log today", "error.log"),
        ("logs are in /var/log/nginx/error.log today", "nginx"),
        ("logs are in /var/log/nginx/error.log today", "/var/log/nginx/error.log"),
        (BUG, "search_app/query/parse.py"),
        (BUG, "query"),
        # The parts of snake_case, kebab-case and dotted.names.
        (SETTINGS, "retries"),
        (SETTINGS, "citus"),
        ("import formation.embedded_postgres.start first", "embedded_postgres"),
        ("call messages.selectors.history then", "selectors"),
        ("call messages.selectors.history then", "messages"),
        (SETTINGS, "settings"),
        # camelCase and PascalCase, acronyms included.
        (CAMEL, "user"),
        (CAMEL, "camel"),
        (DEPLOY, "reset"),
        ("the HTTPServer class restarted", "server"),
        ("the HTTPServer class restarted", "HTTP"),
        # An e-mail address, a host and a URL's path.
        ("write to ops.team@example.org about it", "example.org"),
        ("write to ops.team@example.org about it", "team"),
        (DEPLOY, "api"),
        (DEPLOY, "users"),
        # A ticket number in other spellings.
        ("blocked by JIRA-77 still", "77"),
        ("fixed in #4512 yesterday", "4512"),
    ],
)
def test_each_identifier_kind_finds_its_message(room, text, query):
    message = say(room, text)
    say(room, "unrelated words about lunch")

    assert found(search(room, query)) == [message.id]


def test_a_whole_word_ranks_above_the_same_word_as_a_part(room):
    """``user`` typed: the message where it is a word of its own first, then the identifier
    holding it; both found."""
    part = say(room, "getUserById returned nothing", 0)
    whole = say(room, "the user returned nothing", 1)
    older_whole = say(room, "one user returned nothing", -1)

    result = search(room, "user")

    assert found(result) == [whole.id, older_whole.id, part.id]
    by_id = dict(zip(found(result), result.hits, strict=True))
    assert by_id[part.id].values["text"] < by_id[whole.id].values["text"]


def test_a_file_name_typed_whole_ranks_above_its_path(room):
    in_path = say(room, "edit search_app/query/parse.py first", 0)
    alone = say(room, "edit parse.py first", -1)

    assert found(search(room, "parse.py")) == [alone.id, in_path.id]


def test_an_identifier_typed_whole_is_matched_whole(room):
    """The query is not split: ``getUserById`` does not find a sentence of its words."""
    identifier = say(room, "getUserById returned nothing", 0)
    say(room, "get the user by their id", 1)

    assert found(search(room, "getUserById")) == [identifier.id]
    assert [term.lexemes for term in parse_query("getUserById").terms] == [("getuserbyid",)]
    assert [term.lexemes for term in parse_query("parse.py").terms] == [("parse.py",)]


def test_a_part_counts_half_a_word_in_the_ranking(room):
    """One occurrence of a part is a term frequency of ``IDENTIFIER_PART_WEIGHT``."""
    message = say(room, "getUserById")
    result = search(room, "user")
    hit = result.hits[0]
    assert hit.message.id == message.id
    frequency = ranking.IDENTIFIER_PART_WEIGHT
    length, average = 4, 4.0  # getuserbyid, get, user, id: the only eligible match
    norm = ranking.BM25_K1 * (1 - ranking.BM25_B + ranking.BM25_B * length / average)
    assert hit.values["text"] == pytest.approx(0.9 * frequency / (frequency + norm), abs=1e-6)


def test_the_document_holds_parts_at_their_identifiers_position(room):
    message = say(room, "see PROJ-1234 at app/x.py v1.2.3 getUserById")
    assert document_of(message) == (
        "'-1234':3 '1234':3C 'app':5C 'app/x.py':5 'get':7C 'getuserbyid':7 'id':7C 'proj':2 "
        "'py':5C 'see':1 'user':7C 'v1.2.3':6 'x':5C 'x.py':5C"
    )


def test_text_without_identifiers_is_indexed_as_before(room):
    message = say(room, "Plain words, a well-known phrase. And sentences end here.")
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT to_tsvector('formation_english', %s)::text",
            ["Plain words, a well-known phrase. And sentences end here."],
        )
        assert document_of(message) == cursor.fetchone()[0]


def test_phrases_and_prefixes_still_work_across_identifiers(room):
    message = say(room, BUG)
    say(room, "see parse later")

    assert found(search(room, '"parse.py see"')) == [message.id]
    assert found(search(room, '"inside search_app/query/parse.py"')) == [message.id]
    assert found(search(room, "ConnectionRes*")) == []
    deploy = say(room, DEPLOY, 1)
    assert found(search(room, "connectionres*")) == [deploy.id]


@pytest.mark.parametrize(
    ("text", "query", "identifier", "words"),
    [
        (BUG, "1234", "PROJ-1234", ["1234"]),
        (BUG, "parse.py", "parse.py", ["parse", "py"]),
        (BUG, "PROJ-1234", "PROJ-1234", ["PROJ", "1234"]),
        (SETTINGS, "settings.py", "settings.py", ["settings", "py"]),
        ("logs are in /var/log/nginx/error.log", "nginx", "/var/log/nginx/error.log", ["nginx"]),
        (DEPLOY, "api.example.com", "api.example.com", ["api", "example", "com"]),
    ],
)
def test_a_part_is_highlighted_inside_its_identifier(room, text, query, identifier, words):
    """The identifier's own words are marked where they stand inside it. (As for every phrase,
    ``ts_headline`` also marks each of the words where it stands alone.)"""
    message = say(room, text)

    result = search(room, query)

    assert found(result) == [message.id]
    spans = result.highlights[0]
    start = text.index(identifier)
    inside = [span for span in spans if start <= span[0] < start + len(identifier)]
    assert words_at(text, inside) == words


def test_another_language_splits_identifiers_too(db):
    workspace = factories.make_workspace("ids-fr")
    workspace.language = "french"
    workspace.save(update_fields=["language"])
    room = factories.joined_room(workspace, "Alice Exemple", "Bob Exemple")
    message = say(room, "le fichier src/exemple.py et getUserById")

    assert found(search(room, "exemple.py")) == [message.id]
    assert found(search(room, "user")) == [message.id]


def test_a_part_in_a_room_the_agent_may_not_read_is_never_found(room):
    """The parts obey every perspective rule: a withheld identifier is not returned, and the
    visible world answers exactly as it would without it."""
    visible = say(room, "see search_app/query/parse.py", 0)
    before = search(room, "parse")
    hidden = factories.make_conversation(room.workspace, "private", "hidden")
    factories.join(hidden, room.people[0], joined_at=factories.EARLY)
    factories.post(hidden, room.people[0], "parse.py and parse_query()", created_at=at(1))

    after = search(room, "parse")

    assert found(after) == found(before) == [visible.id]
    assert [hit.values for hit in after.hits] == [hit.values for hit in before.hits]


def test_the_migration_rebuilds_documents_written_without_parts(room):
    message = say(room, BUG)
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE message_search_documents AS d SET document = "
            "to_tsvector('formation_english'::regconfig, m.content) "
            "FROM messages_app_message AS m WHERE m.workspace_id = d.workspace_id "
            "AND m.id = d.message_id AND d.workspace_id = %s AND m.id = %s",
            [message.workspace_id, message.id],
        )
    assert found(search(room, "1234")) == []

    migration = import_module("search_app.migrations.0011_identifier_parts")
    migration.rebuild_documents(None, connection.schema_editor())

    assert found(search(room, "1234")) == [message.id]


def test_the_migration_goes_back_to_documents_without_parts(room):
    """0011's reverse restores 0005's functions, rebuilds the documents and rewrites the
    memories with identifiers; it once called a function it had just dropped."""
    message = say(room, CAMEL)
    plain = "SELECT to_tsvector('formation_english'::regconfig, %s)::text"
    with connection.cursor() as cursor:
        cursor.execute(plain, [CAMEL])
        words_only = cursor.fetchone()[0]
    assert document_of(message) != words_only

    migration = import_module("search_app.migrations.0011_identifier_parts")
    with connection.cursor() as cursor:
        cursor.execute(migration.RESTORE_FUNCTIONS)
    migration.rebuild_documents(None, connection.schema_editor())

    assert document_of(message) == words_only
