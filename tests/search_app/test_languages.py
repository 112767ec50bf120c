"""A text search configuration per workspace (``Workspace.language``).

Documents and queries of a workspace are built with its configuration, so German and French
inflections conflate in workspaces of those languages, and stop words are that language's. A
workspace whose language changes keeps its old documents until ``rebuild_search_documents
--workspace`` writes them again. All text is synthetic.
"""

from __future__ import annotations

import io

import pytest
from django.contrib.admin.models import LogEntry
from django.core.management import CommandError, call_command
from django.db import DatabaseError, connection, transaction
from django.urls import reverse

from formation.errors import InvalidArguments
from messages_app import services
from messages_app.models import Workspace
from search_app.query.parse import parse_query
from tests import factories
from tests.factories import at

pytestmark = pytest.mark.django_db

NOW = at(30 * 24 * 60)


def room_in(language: str | None, slug: str):
    """A private room of a new workspace in ``language`` (the default without one)."""
    extra = {} if language is None else {"language": language}
    return factories.joined_room(services.workspace_create(slug=slug, **extra), "Alice Example")


def say(room, text: str, minute: float):
    return factories.post(room, room.people[0], text, created_at=at(minute))


def say_apart(room, text: str, minute: float):
    """``say``, after fillers: compared hits are not each other's context (docs/search.md)."""
    return factories.post_apart(room, room.people[0], text, created_at=at(minute))


def hits(room, query: str) -> list:
    return [hit.message.id for hit in factories.room_history(room, query, NOW).hits]


def test_a_german_workspace_conflates_german_inflections(db):
    german = room_in("german", "de")
    house = say(german, "Das Haus ist alt", 0)
    houses = say(german, "Die Häuser sind neu", 1)
    english = room_in(None, "en")
    say(english, "Das Haus ist alt", 0)
    english_houses = say(english, "Die Häuser sind neu", 1)

    assert hits(german, "Häuser") == [houses.id, house.id]
    assert hits(german, "Haus") == [houses.id, house.id]
    assert hits(english, "Häuser") == [english_houses.id]


def test_a_french_workspace_conflates_french_inflections(db):
    french = room_in("french", "fr")
    plural = say_apart(french, "Les chevaux mangent", 0)
    singular = say_apart(french, "un cheval blanc", 1)
    english = room_in(None, "en")
    say(english, "Les chevaux mangent", 0)
    english_singular = say(english, "un cheval blanc", 1)

    assert hits(french, "cheval") == [singular.id, plural.id]
    assert hits(english, "cheval") == [english_singular.id]


def test_stop_words_are_the_workspace_languages(db):
    """ "und die" is all stop words in German, plain words in English, and the other way
    round for "the and"."""
    german = room_in("german", "de")
    english = room_in(None, "en")
    english_words = say(german, "the and", 0)
    german_words = say(english, "und die", 0)

    for query, room in (("und die", german), ("the and", english)):
        with pytest.raises(InvalidArguments):
            parse_query(query, workspace_id=room.workspace_id)
    assert hits(english, "und die") == [german_words.id]
    assert hits(german, "the and") == [english_words.id]
    assert parse_query("the and", workspace_id=german.workspace_id).config == "german"


def test_simple_keeps_every_word_unstemmed(db):
    simple = room_in("simple", "plain")
    exact = say(simple, "the houses", 0)
    say(simple, "a house", 1)

    assert hits(simple, "houses") == [exact.id]
    assert hits(simple, "the") == [exact.id]


def test_a_language_change_is_repaired_by_the_rebuild(db):
    """English documents do not conflate German words; after the switch to German, queries are
    German at once, and the workspace's documents after its rebuild (with progress)."""
    room = room_in(None, "switch")
    old = say(room, "Das Haus ist alt", 0)
    new = say(room, "Die Häuser sind neu", 1)
    elsewhere = room_in(None, "other")
    untouched = say(elsewhere, "Die Häuser sind neu", 1)
    assert hits(room, "Haus") == [old.id]

    Workspace.objects.filter(pk=room.workspace_id).update(language="german")
    assert hits(room, "Haus") == [old.id]  # "Häuser" is still indexed as English
    check = io.StringIO()
    with pytest.raises(CommandError):
        call_command("rebuild_search_documents", check=True, workspace="switch", stdout=check)
    assert "2 rows drifted (0 missing, 2 stale" in check.getvalue()

    output = io.StringIO()
    call_command("rebuild_search_documents", workspace="switch", batch_size=1, stdout=output)

    assert output.getvalue().splitlines()[0] == "Checking 2 messages in batches of 1..."
    assert "fixed 2 rows (0 missing, 2 stale" in output.getvalue()
    assert hits(room, "Haus") == [new.id, old.id]
    assert hits(elsewhere, "Häuser") == [untouched.id]
    call_command("rebuild_search_documents", check=True, stdout=io.StringIO())


def test_rebuild_of_an_unknown_workspace_is_refused(db):
    with pytest.raises(CommandError):
        call_command("rebuild_search_documents", workspace="nowhere", stdout=io.StringIO())


def test_create_workspace_takes_a_language(db):
    output = io.StringIO()
    call_command("create_workspace", "lang-de", "--language", "german", stdout=output)
    assert Workspace.objects.get(slug="lang-de").language == "german"
    call_command("create_workspace", "lang-default", stdout=output)
    assert Workspace.objects.get(slug="lang-default").language == "formation_english"


@pytest.mark.parametrize("language", ["klingon", "", "german; drop table x", "GERMAN"])
def test_an_unknown_language_is_refused_everywhere(db, language):
    with pytest.raises(CommandError):
        call_command("create_workspace", "bad", "--language", language, stdout=io.StringIO())
    with pytest.raises(InvalidArguments):
        services.workspace_create(slug="bad", language=language)
    assert not Workspace.objects.filter(slug="bad").exists()
    # The database refuses it too: every message insert casts the language to regconfig.
    workspace = factories.make_workspace("good")
    with pytest.raises(DatabaseError), transaction.atomic():
        Workspace.objects.filter(pk=workspace.pk).update(language=language)
    with connection.cursor() as cursor:
        cursor.execute("SELECT language FROM messages_app_workspace WHERE id = %s", [workspace.id])
        assert cursor.fetchone() == ("formation_english",)


def test_a_workspace_inserted_by_hand_gets_the_default_language(db):
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO messages_app_workspace (id, slug, name, created_at) "
            "VALUES (gen_random_uuid(), 'by-hand', 'by hand', now())"
        )
    assert Workspace.objects.get(slug="by-hand").language == "formation_english"


def test_the_admin_shows_and_changes_the_language_with_a_warning(admin_client, db):
    workspace = factories.make_workspace("admin-lang")
    url = reverse("admin:messages_app_workspace_change", args=[workspace.pk])
    page = admin_client.get(url).content.decode()
    assert '<option value="german">german</option>' in page
    assert '<option value="formation_english" selected>formation_english</option>' in page
    listing = admin_client.get(reverse("admin:messages_app_workspace_changelist")).content
    assert b"formation_english" in listing

    response = admin_client.post(
        url,
        {
            "slug": "admin-lang",
            "name": workspace.name,
            "language": "german",
            "created_at_0": "2026-01-02",
            "created_at_1": "03:04:05",
        },
        follow=True,
    )

    assert response.status_code == 200
    assert Workspace.objects.get(pk=workspace.pk).language == "german"
    warning = "rebuild_search_documents --workspace admin-lang"
    assert warning in response.content.decode()
    assert LogEntry.objects.filter(object_id=str(workspace.pk)).exists()
    bad = admin_client.post(url, {"slug": "admin-lang", "language": "klingon"})
    assert bad.status_code == 200  # the form again, with its error
    assert Workspace.objects.get(pk=workspace.pk).language == "german"
