"""The search audit in the admin (SPEC §7): trusted administrators only, read-only for all.

A *trusted administrator* is a staff user holding ``audit_app.inspect_search_audit``; a
superuser holds every permission. Both may list and view events, filter them and look a query
text up through its digest under every configured key; neither may add, change or delete one,
and there is no bulk action. An ordinary staff user sees no trace of the model. Logins are real
sessions (``force_login``) on Django's test client.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from audit_app.models import ConversationSearchEvent
from messages_app.models import Message, Run
from tests import factories
from tests.audit_app.helpers import (
    EXCLUSION_KEYS,
    REASONS,
    keyed_digest,
    make_event,
    search,
    staff_client,
)
from tests.factories import at

pytestmark = pytest.mark.django_db

MARCH_10 = datetime(2025, 3, 10, 12, 0, tzinfo=UTC)
SAVE_BUTTONS = ('name="_save"', 'name="_continue"', 'name="_addanother"', 'name="_saveasnew"')
OLD_KEYS = [("test2", "test-only-audit-key-two"), ("test1", "test-only-audit-key-one")]


def url(view: str, *args: object) -> str:
    return reverse(f"admin:audit_app_conversationsearchevent_{view}", args=args)


def login(username: str, *, superuser: bool = False, inspect: bool = False) -> Client:
    codename = "inspect_search_audit" if inspect else None
    return staff_client(username, codename=codename, superuser=superuser)


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
    assert "Audit records" not in html
    assert "Search audit events" not in html
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


# --- reading an event: names, links and tables ---------------------------------------------


@pytest.fixture
def detailed(audit, world) -> ConversationSearchEvent:
    """A search_history event naming two hits and a neighbour in the world's public room, with
    the rankings and exclusions the service writes."""
    first = factories.post(world.public, world.bob, "sample first")
    second = factories.post(world.public, world.alice, "sample second")
    neighbour = factories.post(world.public, world.bob, "sample between")
    rankings = [
        {
            "messageId": str(message.id),
            "score": score,
            "components": {"text": text, "actor": 0.1, "recency": 0.0125},
        }
        for message, score, text in ((first, 0.6125, 0.5), (second, 0.3625, 0.25))
    ]
    return make_event(
        audit.run,
        hit_ids=[first.id, second.id],
        neighbour_ids=[neighbour.id],
        rankings=rankings,
        result_count=2,
        exclusions={**dict.fromkeys(REASONS, 0), "unknown_audience": 3, "not_observed": 1},
    )


def message_link(message_id: object) -> str:
    return f'href="{reverse("admin:messages_app_message_change", args=[message_id])}"'


def test_an_event_is_titled_by_its_tool_and_agent_name_not_uuids(audit, trusted, world):
    event = audit.plan_here
    page = trusted.get(url("change", event.pk)).content.decode()
    title = page.split("<title>")[1].split("</title>")[0]

    assert title.startswith(f"search_history by {world.agent.name} at ")
    assert str(world.agent.pk) not in title
    assert str(event) == (
        f"search_history by {world.agent.name} at {event.created_at:%Y-%m-%d %H:%M:%S}"
    )


def test_the_list_names_agents_and_destinations_and_leaves_out_long_columns(audit, trusted):
    response = trusted.get(url("changelist"))
    html = response.content.decode()

    assert "Helper agent" in html
    assert ">general<" in html  # the destination conversation's title
    assert f'?agent__id__exact={audit.run.agent_id}"' in html  # the agent narrows the list
    # No run UUID, key id or workspace column: they made the table overflow.
    assert str(audit.run.pk) not in html
    for column in ("column-run", "column-key_id", "column-workspace"):
        assert column not in html


def test_hits_and_neighbours_link_to_their_messages(detailed, trusted):
    html = trusted.get(url("change", detailed.pk)).content.decode()

    for message_id in (*detailed.hit_ids, *detailed.neighbour_ids):
        assert message_link(message_id) in html
    first = Message.objects.get(pk=detailed.hit_ids[0])
    assert f"general #{first.seq}</a>" in html  # labelled by conversation title and seq


def test_rankings_are_a_table_with_a_row_per_hit(detailed, trusted):
    html = trusted.get(url("change", detailed.pk)).content.decode()
    table = html.split('<table class="audit-table rankings">')[1].split("</table>")[0]

    header = table.split("</thead>")[0]
    for column in ("#", "message", "score", "text", "actor", "recency"):
        assert f">{column}</th>" in header
    rows = table.split("</thead>")[1].split("</tr>")[:-1]
    assert len(rows) == 2
    assert message_link(detailed.hit_ids[0]) in rows[0]
    for cell in (">1<", ">0.6125<", ">0.5<", ">0.1<", ">0.0125<"):
        assert cell in rows[0]
    assert message_link(detailed.hit_ids[1]) in rows[1]
    assert ">0.3625<" in rows[1]
    assert '"messageId"' not in html  # no raw JSON blob
    assert "&quot;messageId&quot;" not in html


def test_exclusions_use_the_api_camel_case_names(detailed, trusted, audit):
    html = trusted.get(url("change", detailed.pk)).content.decode()

    for name in EXCLUSION_KEYS:
        assert f"<th>{name}</th>" in html
    for snake in ("not_observed", "unknown_audience", "current_message", "recent_history"):
        assert snake not in html
    assert '<th>unknownAudience</th><td class="number nonzero">3</td>' in html
    assert '<th>notObserved</th><td class="number nonzero">1</td>' in html


def test_filters_help_text_matches_the_tool(audit, trusted, world):
    messages_event = make_event(
        audit.run,
        tool="search_messages",
        filters={"conversationId": str(world.public.pk), "limit": 20},
    )
    agent_only = make_event(
        audit.run, tool="search_messages", filters={"conversationId": None, "limit": 5}
    )
    # Called with an agent token: no run, destination or requester.
    ConversationSearchEvent.objects.filter(pk=agent_only.pk).update(
        run=None, destination=None, requester=None
    )
    memories = make_event(audit.run, tool="memories", filters={"limit": 10})
    history_help = "speaker, after and before as the caller gave them"
    messages_help = "conversationId (null: every conversation the agent is in) and limit."

    history_page = trusted.get(url("change", audit.plan_here.pk)).content.decode()
    assert history_help in history_page
    assert messages_help not in history_page
    assert "<th>speaker</th><td>anyone</td>" in history_page

    for event in (messages_event, agent_only):
        page = trusted.get(url("change", event.pk)).content.decode()
        assert messages_help in page
        assert history_help not in page
        assert "speaker, after, before and limit." not in page  # the model field's help text
        assert "Not counted: only search_history classifies" in page
    linked = trusted.get(url("change", messages_event.pk)).content.decode()
    conversation_filter = f"?conversation__id__exact={world.public.pk}"
    assert conversation_filter in linked

    memory_page = trusted.get(url("change", memories.pk)).content.decode()
    assert "limit: memory recall takes no other filter." in memory_page
    assert history_help not in memory_page


def test_memory_hits_are_not_linked_as_messages(audit, trusted):
    memory_id = uuid.uuid4()
    event = make_event(audit.run, tool="memories", hit_ids=[memory_id], filters={"limit": 10})

    html = trusted.get(url("change", event.pk)).content.decode()

    assert str(memory_id) in html
    assert message_link(memory_id) not in html
    assert "memory ids" in html


def test_an_event_page_costs_the_same_queries_however_many_hits(audit, trusted, world):
    few = make_event(audit.run, hit_ids=[factories.post(world.public, world.bob).id])
    many_ids = [factories.post(world.public, world.bob, f"sample {n}").id for n in range(12)]
    many = make_event(
        audit.run,
        hit_ids=many_ids[:6],
        neighbour_ids=many_ids[6:],
        rankings=[
            {"messageId": str(pk), "score": 0.5, "components": {"text": 0.5}} for pk in many_ids[:6]
        ],
    )
    trusted.get(url("change", few.pk))
    with CaptureQueriesContext(connection) as one:
        trusted.get(url("change", few.pk))
    with CaptureQueriesContext(connection) as twelve:
        response = trusted.get(url("change", many.pk))
    assert response.status_code == 200
    assert len(twelve) == len(one)


def test_the_list_costs_the_same_queries_however_many_events(audit, trusted):
    trusted.get(url("changelist"))
    with CaptureQueriesContext(connection) as few:
        trusted.get(url("changelist"))
    for _ in range(10):
        make_event(audit.run)
    with CaptureQueriesContext(connection) as many:
        response = trusted.get(url("changelist"))
    assert len(listed(response)) == 14
    assert len(many) == len(few)


def test_the_sidebar_does_not_list_every_agent(audit, trusted, superuser, world):
    for number in range(30):
        factories.make_agent(world.workspace, f"Sample roster agent {number}")

    for client in (trusted, superuser):
        with CaptureQueriesContext(connection) as queries:
            html = client.get(url("changelist")).content.decode()
        assert "Sample roster agent" not in html
        assert not any("FILTER (WHERE" in query["sql"] for query in queries)  # no facet counts

    # A superuser may view agents, so picks one through the autocomplete: the picker holds
    # the chosen agent only, and asks the agent admin for matches.
    picked = superuser.get(url("changelist"), {"agent__id__exact": world.agent.pk})
    html = picked.content.decode()
    picker = html.split('<select name="agent__id__exact"')[1].split("</select>")[0]
    assert picker.count("<option") == 2  # the empty choice and the chosen agent
    assert "Helper agent" in picker
    assert 'class="admin-autocomplete' in picker
    assert listed(picked) == {audit.plan_here.pk, audit.other_here.pk, audit.exhausted.pk}
    factories.make_agent(world.workspace, "Sample scout")
    found = superuser.get(
        reverse("admin:autocomplete"),
        {
            "app_label": "audit_app",
            "model_name": "conversationsearchevent",
            "field_name": "agent",
            "term": "scout",
        },
    )
    assert [item["text"] for item in found.json()["results"]] == ["Sample scout"]

    # An investigator without the agent admin sees the chosen agent's name, and no picker.
    named = trusted.get(url("changelist"), {"agent__id__exact": world.agent.pk})
    html = named.content.decode()
    assert '<select name="agent__id__exact"' not in html
    assert '<li class="selected">' in html.split("By agent")[1].split("</details>")[0]
    assert "Helper agent</a></li>" in html
    assert listed(named) == {audit.plan_here.pk, audit.other_here.pk, audit.exhausted.pk}


def test_a_malformed_filter_id_is_a_redirect_not_an_error(audit, trusted):
    response = trusted.get(url("changelist"), {"agent__id__exact": "not-a-uuid"})

    assert response.status_code == 302
    assert response["Location"].endswith("?e=1")


def test_an_event_opened_from_a_search_does_not_carry_the_query_text(audit, trusted):
    """The text stays in the investigator's own search box and the list's own links: the link
    to an event does not carry it (Django's preserved filters would), so neither does the event
    page's URL, its links back, nor the browser history of that page."""
    listing = trusted.get(url("changelist"), {"q": "sample plan"}).content.decode()
    change = url("change", audit.plan_here.pk)
    event_links = re.findall(rf'href="({re.escape(change)}[^"]*)"', listing)

    assert event_links == [change]
    page = trusted.get(change).content.decode()
    assert "sample" not in page.lower()
