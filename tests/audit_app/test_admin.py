"""The search audit in the admin (SPEC §7): trusted administrators only, read-only for all.

A *trusted administrator* is a staff user holding ``audit_app.inspect_search_audit``; a
superuser holds every permission. Both may list and view events, filter them and look a query
text up through its digest under every configured key; neither may add, change or delete one,
and there is no bulk action. An ordinary staff user sees no trace of the model. Logins are real
sessions (``force_login``) on Django's test client.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from audit_app.models import ConversationSearchEvent
from messages_app.models import Run
from tests import factories
from tests.audit_app.helpers import keyed_digest, make_event, search
from tests.factories import at

pytestmark = pytest.mark.django_db

MARCH_10 = datetime(2025, 3, 10, 12, 0, tzinfo=UTC)
SAVE_BUTTONS = ('name="_save"', 'name="_continue"', 'name="_addanother"', 'name="_saveasnew"')
OLD_KEYS = [("test2", "test-only-audit-key-two"), ("test1", "test-only-audit-key-one")]


def url(view: str, *args: object) -> str:
    return reverse(f"admin:audit_app_conversationsearchevent_{view}", args=args)


def login(username: str, *, superuser: bool = False, inspect: bool = False) -> Client:
    user = User.objects.create_user(
        username=username, password=None, is_staff=True, is_superuser=superuser
    )
    if inspect:
        user.user_permissions.add(
            Permission.objects.get(
                codename="inspect_search_audit", content_type__app_label="audit_app"
            )
        )
    client = Client()
    client.force_login(user)
    return client


def listed(response) -> set:
    assert response.status_code == 200, response.status_code
    return {event.pk for event in response.context["cl"].result_list}


@dataclass
class Audit:
    run: Run
    foreign_run: Run
    plan_here: ConversationSearchEvent  # "Sample  PLAN" in the world's workspace
    other_here: ConversationSearchEvent  # "status words", moved to 10 March 2025
    plan_there: ConversationSearchEvent  # "sample plan" in another workspace
    exhausted: ConversationSearchEvent  # an event with another outcome, made directly


@pytest.fixture
def audit(world) -> Audit:
    factories.post(world.public, world.bob, "sample plan status words")
    run, client = factories.make_run(world.agent, world.public, world.alice)
    assert search(client, {"query": "Sample  PLAN"}).status_code == 200
    assert search(client, {"query": "status words"}).status_code == 200
    workspace, agent, room, _ = factories.other_workspace()
    foreign_run, foreign_client = factories.make_run(
        agent, room, factories.make_account(workspace, "Dana Example")
    )
    assert search(foreign_client, {"query": "sample plan"}).status_code == 200
    plan_here, other_here = ConversationSearchEvent.objects.filter(run=run).order_by("created_at")
    ConversationSearchEvent.objects.filter(pk=other_here.pk).update(created_at=MARCH_10)
    exhausted = make_event(run, outcome="budget_exhausted", budget_used=400)
    return Audit(
        run=run,
        foreign_run=foreign_run,
        plan_here=plan_here,
        other_here=other_here,
        plan_there=ConversationSearchEvent.objects.get(run=foreign_run),
        exhausted=exhausted,
    )


@pytest.fixture
def trusted() -> Client:
    return login("auditor", inspect=True)


@pytest.fixture
def superuser() -> Client:
    return login("root", superuser=True)


def all_events() -> set:
    return set(ConversationSearchEvent.objects.values_list("pk", flat=True))


# --- who may look ------------------------------------------------------------------------


@pytest.mark.parametrize("who", ["trusted", "superuser"])
def test_trusted_administrators_see_the_list_and_the_read_only_page(audit, who, request):
    client = request.getfixturevalue(who)

    assert listed(client.get(url("changelist"))) == all_events()
    page = client.get(url("change", audit.plan_here.pk))

    assert page.status_code == 200
    html = page.content.decode()
    assert audit.plan_here.query_digest in html
    assert str(audit.plan_here.hit_ids[0]) in html
    for button in SAVE_BUTTONS:
        assert button not in html
    assert 'class="deletelink"' not in html
    assert 'name="key_id"' not in html  # read-only text, not a form field
    assert page.context["has_change_permission"] is False
    assert client.get(url("history", audit.plan_here.pk)).status_code == 200
    index = client.get(reverse("admin:index")).content.decode()
    assert url("changelist") in index


def test_an_ordinary_staff_user_sees_nothing_of_the_audit(audit):
    client = login("staffer")

    assert client.get(url("changelist")).status_code == 403
    assert client.get(url("change", audit.plan_here.pk)).status_code == 403
    assert client.get(url("history", audit.plan_here.pk)).status_code == 403
    assert client.get(url("changelist"), {"q": "sample plan"}).status_code == 403
    index = client.get(reverse("admin:index"))
    assert index.status_code == 200
    html = index.content.decode()
    assert url("changelist") not in html
    assert "Search audit" not in html
    assert "conversationsearchevent" not in html


def test_the_permission_without_staff_status_is_not_enough(audit):
    user = User.objects.create_user(username="outsider", password=None, is_staff=False)
    user.user_permissions.add(Permission.objects.get(codename="inspect_search_audit"))
    client = Client()
    client.force_login(user)

    response = client.get(url("changelist"))

    assert response.status_code == 302
    assert reverse("admin:login") in response["Location"]


# --- nobody may write --------------------------------------------------------------------


@pytest.mark.parametrize("who", ["trusted", "superuser"])
def test_nobody_adds_changes_or_deletes_an_event(audit, who, request):
    client = request.getfixturevalue(who)
    event = audit.plan_here
    before = ConversationSearchEvent.objects.filter(pk=event.pk).values().get()
    count = ConversationSearchEvent.objects.count()

    assert client.get(url("add")).status_code == 403
    assert (
        client.post(url("add"), {"key_id": "forged", "query_digest": "0" * 64}).status_code == 403
    )
    assert (
        client.post(
            url("change", event.pk), {"key_id": "forged", "outcome": "budget_exhausted"}
        ).status_code
        == 403
    )
    assert client.get(url("delete", event.pk)).status_code == 403
    assert client.post(url("delete", event.pk), {"post": "yes"}).status_code == 403

    assert ConversationSearchEvent.objects.count() == count
    assert ConversationSearchEvent.objects.filter(pk=event.pk).values().get() == before


@pytest.mark.parametrize("who", ["trusted", "superuser"])
def test_there_is_no_bulk_action(audit, who, request):
    client = request.getfixturevalue(who)

    page = client.get(url("changelist"))
    assert page.context["action_form"] is None
    assert 'name="action"' not in page.content.decode()
    assert 'name="_selected_action"' not in page.content.decode()

    response = client.post(
        url("changelist"),
        {"action": "delete_selected", "_selected_action": [str(pk) for pk in all_events()]},
    )
    assert response.status_code in (200, 302)
    confirm = client.post(
        url("changelist"),
        {
            "action": "delete_selected",
            "_selected_action": [str(pk) for pk in all_events()],
            "post": "yes",
        },
    )
    assert confirm.status_code in (200, 302)
    assert ConversationSearchEvent.objects.count() == 4


# --- filters ------------------------------------------------------------------------------


def test_filters_by_workspace_agent_outcome_and_date(audit, trusted, world):
    here = {audit.plan_here.pk, audit.other_here.pk, audit.exhausted.pk}

    assert listed(trusted.get(url("changelist"), {"workspace__id__exact": world.workspace.pk})) == (
        here
    )
    foreign_agent = audit.foreign_run.agent_id
    assert listed(trusted.get(url("changelist"), {"agent__id__exact": foreign_agent})) == {
        audit.plan_there.pk
    }
    assert listed(trusted.get(url("changelist"), {"agent__id__exact": world.agent.pk})) == here
    assert listed(trusted.get(url("changelist"), {"outcome__exact": "budget_exhausted"})) == {
        audit.exhausted.pk
    }
    march = {"created_at__year": 2025, "created_at__month": 3}
    assert listed(trusted.get(url("changelist"), march)) == {audit.other_here.pk}
    assert listed(trusted.get(url("changelist"), {**march, "created_at__day": 10})) == {
        audit.other_here.pk
    }
    assert listed(trusted.get(url("changelist"), {**march, "created_at__day": 11})) == set()
    recent = {
        "created_at__gte": "2026-01-01 00:00:00+00:00",
        "created_at__lt": "2100-01-01 00:00:00+00:00",
    }
    assert listed(trusted.get(url("changelist"), recent)) == all_events() - {audit.other_here.pk}
    # Filters and the search box combine.
    both = {"workspace__id__exact": world.workspace.pk, "q": "sample plan"}
    assert listed(trusted.get(url("changelist"), both)) == {audit.plan_here.pk}


# --- the search box: a query text, matched through its digests -----------------------------


def test_the_search_box_finds_a_query_text_through_its_digest(audit, trusted):
    plans = {audit.plan_here.pk, audit.plan_there.pk}

    for text in ("sample plan", "Sample  PLAN", "  SAMPLE\tplan"):
        assert listed(trusted.get(url("changelist"), {"q": text})) == plans
    assert listed(trusted.get(url("changelist"), {"q": "status words"})) == {audit.other_here.pk}
    assert listed(trusted.get(url("changelist"), {"q": "sample"})) == set()
    assert listed(trusted.get(url("changelist"), {"q": "sample plan status"})) == set()
    assert listed(trusted.get(url("changelist"), {"q": "   "})) == all_events()


def test_the_search_box_finds_events_of_every_configured_key_after_a_rotation(
    audit, trusted, settings, world
):
    assert [key for key, _ in settings.SEARCH_AUDIT_KEYS] == ["test2", "test1"]
    run = audit.run
    # An event from before test2 existed, written under test1.
    older = make_event(
        run, key_id="test1", query_digest=keyed_digest("sample plan", "test-only-audit-key-one")
    )
    settings.SEARCH_AUDIT_KEYS = [("test3", "synthetic-rotated-secret-three"), *OLD_KEYS]

    rotated, client = factories.make_run(world.agent, world.public, world.alice)
    assert search(client, {"query": "SAMPLE plan"}).status_code == 200

    newest = ConversationSearchEvent.objects.get(run=rotated)
    assert newest.key_id == "test3"
    assert newest.query_digest == keyed_digest("sample plan", "synthetic-rotated-secret-three")
    assert newest.query_digest != audit.plan_here.query_digest
    found = listed(trusted.get(url("changelist"), {"q": "sample plan"}))
    assert found == {audit.plan_here.pk, audit.plan_there.pk, older.pk, newest.pk}

    # A digest matches only under the key that wrote it.
    make_event(run, key_id="test3", query_digest=keyed_digest("sample plan", OLD_KEYS[0][1]))
    assert listed(trusted.get(url("changelist"), {"q": "sample plan"})) == found

    # Retiring a key retires what it can find.
    settings.SEARCH_AUDIT_KEYS = [("test3", "synthetic-rotated-secret-three")]
    assert listed(trusted.get(url("changelist"), {"q": "sample plan"})) == {newest.pk}


def test_the_changelist_renders_every_event_kind(audit, trusted, world):
    """A page of real events (hits, neighbours, rankings) and a bare one renders fine."""
    _, client = factories.make_run(world.agent, world.public, world.alice)
    factories.post(world.public, world.bob, "sample plan again")
    assert search(client, {"query": "plan", "after": at(-10_000).isoformat()}).status_code == 200
    response = trusted.get(url("changelist"))
    assert len(listed(response)) == 5
    for event in ConversationSearchEvent.objects.all():
        assert trusted.get(url("change", event.pk)).status_code == 200
