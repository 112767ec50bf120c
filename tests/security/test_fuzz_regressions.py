"""What schemathesis and the hostile-input table found, pinned so it cannot come back."""

from __future__ import annotations

import json

import pytest
from django.test import Client, RequestFactory
from drf_spectacular.generators import SchemaGenerator

from formation.errors import _field_errors, csrf_failure_view
from messages_app.models import Account, Message
from tests import factories

ENVELOPE_KEYS = {"code", "message", "details"}


def _error(response) -> dict:
    assert response["Content-Type"].startswith("application/json"), response.content[:80]
    body = json.loads(response.content)
    assert set(body) == {"error"}
    assert set(body["error"]) == ENVELOPE_KEYS
    return body["error"]


@pytest.mark.parametrize("method", ["post", "patch", "put", "delete"])
def test_a_write_to_an_unknown_api_path_is_a_json_404_not_the_csrf_page(db, method) -> None:
    """Found by the fuzzer: ``PATCH /api/v1/messages/null,null`` fell through to the catch-all
    view, where Django's CSRF check answered its HTML 403 page."""
    client = Client(enforce_csrf_checks=True)
    response = getattr(client, method)(
        "/api/v1/messages/null,null", data="{}", content_type="application/json"
    )
    assert response.status_code == 404
    assert _error(response)["code"] == "not_found"


def test_csrf_failures_under_the_api_are_the_envelope_and_the_admin_keeps_its_page() -> None:
    factory = RequestFactory()
    api = csrf_failure_view(factory.post("/api/v1/anything"), reason="CSRF cookie not set.")
    assert api.status_code == 403
    assert _error(api)["code"] == "forbidden"
    assert b"CSRF cookie not set" not in api.content
    admin = csrf_failure_view(factory.post("/admin/login/"), reason="CSRF cookie not set.")
    assert admin.status_code == 403
    assert admin["Content-Type"].startswith("text/html")


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/accounts",
        "/api/v1/agents",
        "/api/v1/conversations",
        "/api/v1/identity-links",
    ],
)
def test_paged_lists_are_documented_as_one_page_object(path) -> None:
    """Found by the fuzzer: the schema said these answer an array of pages."""
    document = SchemaGenerator().get_schema(request=None, public=True)
    schema = document["paths"][path]["get"]["responses"]["200"]["content"]["application/json"][
        "schema"
    ]
    assert "$ref" in schema, schema
    page = document["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]
    assert set(page["properties"]) == {"items", "total", "limit", "offset"}


def test_an_empty_bulk_names_its_field_in_the_documented_shape(world) -> None:
    """Found by the fuzzer: ``{"messages": []}`` answered ``fields: {messages: {...}}``, where
    the schema (and every other error) has ``fields: {name: [sentence]}``."""
    before = Message.objects.count()
    response = world.service.post(
        f"/api/v1/conversations/{world.public.id}/messages/bulk", {"messages": []}, format="json"
    )
    assert response.status_code == 400
    fields = _error(response)["details"]["fields"]
    assert list(fields) == ["messages"]
    assert all(isinstance(sentence, str) for sentence in fields["messages"])
    assert Message.objects.count() == before


def test_nested_errors_flatten_to_dotted_field_paths() -> None:
    assert _field_errors({"messages": {"non_field_errors": ["Too few."]}}) == {
        "messages": ["Too few."]
    }
    assert _field_errors({"messages": [{}, {"content": ["Too long."]}], "limit": ["Bad."]}) == {
        "messages.1.content": ["Too long."],
        "limit": ["Bad."],
    }
    assert _field_errors(["Whole body."]) == {"non_field_errors": ["Whole body."]}


def test_a_json_body_naming_a_key_twice_is_refused_and_stores_nothing(world) -> None:
    """Found by the hostile-input table: Python kept the last value, so a proxy reading the
    first could see a different request from the one the service carried out."""
    before = Account.objects.count()
    response = world.service.generic(
        "POST",
        "/api/v1/accounts",
        b'{"displayName": "Shown to the proxy", "displayName": "Stored"}',
        content_type="application/json",
    )
    assert response.status_code == 400
    assert _error(response)["code"] == "invalid_arguments"
    assert b"Stored" not in response.content
    assert Account.objects.count() == before


def test_a_key_repeated_inside_a_nested_object_is_refused_too(world) -> None:
    _, client = factories.make_run(world.agent, world.direct, world.alice)
    payload = b'{"query": "sample", "speaker": {"id": "a", "id": "b"}}'
    response = client.generic(
        "POST", "/api/v1/history/search", payload, content_type="application/json"
    )
    assert response.status_code == 400
    error = _error(response)
    assert error["code"] == "invalid_arguments"
    assert "twice" in error["message"]
