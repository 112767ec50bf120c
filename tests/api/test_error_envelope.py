"""Every failure under /api/ answers the SPEC §5 envelope, never a stack trace."""

import pytest
from django.db import OperationalError

from messages_app import selectors
from tests import factories

pytestmark = pytest.mark.django_db


def assert_envelope(response, status: int, code: str) -> dict:
    assert response.status_code == status
    assert response["Content-Type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message", "details"}
    assert body["error"]["code"] == code
    assert "Traceback" not in response.content.decode()
    return body["error"]


def test_unknown_api_path_is_not_found_envelope(world):
    assert_envelope(world.agent_api.get("/api/v1/no-such-thing"), 404, "not_found")


def test_malformed_path_id_is_not_found_envelope(world):
    assert_envelope(world.agent_api.get("/api/v1/messages/not-a-uuid"), 404, "not_found")


def test_wrong_method_is_envelope(world):
    response = world.agent_api.put("/api/v1/messages", {}, format="json")
    assert_envelope(response, 405, "method_not_allowed")


def test_unexpected_exception_is_500_envelope_without_detail(world, monkeypatch):
    def explode(**kwargs):
        raise RuntimeError("secret canary-internal detail")

    monkeypatch.setattr(selectors, "message_get", explode)
    response = world.agent_api.get(f"/api/v1/messages/{world.agent.id}")
    error = assert_envelope(response, 500, "internal_error")
    assert "canary-internal" not in response.content.decode()
    assert error["details"] == {}


def test_database_outage_is_503_unavailable(world, monkeypatch):
    def down(**kwargs):
        raise OperationalError("connection refused canary-db")

    monkeypatch.setattr(selectors, "message_get", down)
    response = world.agent_api.get(f"/api/v1/messages/{world.agent.id}")
    assert_envelope(response, 503, "unavailable")
    assert "canary-db" not in response.content.decode()


def test_unauthenticated_carries_bearer_challenge(world):
    response = factories.bearer_client("fmn_service_bogus").get("/api/v1/accounts")
    assert_envelope(response, 401, "unauthenticated")
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_non_bearer_scheme_is_unauthenticated(world):
    client = factories.bearer_client("x")
    client.credentials(HTTP_AUTHORIZATION="Basic dXNlcjpwYXNz")
    assert_envelope(client.get("/api/v1/accounts"), 401, "unauthenticated")


def test_options_is_method_not_allowed_not_a_crash(world):
    for path in ("/api/v1/accounts", "/api/v1/runs", f"/api/v1/conversations/{world.private.id}"):
        assert_envelope(world.service.options(path), 405, "method_not_allowed")


def test_too_many_query_fields_is_invalid_arguments(world):
    query = "&".join(f"k{i}=1" for i in range(1_100))
    response = world.agent_api.get(f"/api/v1/messages?{query}")
    assert_envelope(response, 400, "invalid_arguments")


def test_unknown_key_with_a_lone_surrogate_is_invalid_arguments(world):
    body = b'{"\\ud800":1,"displayName":"x"}'
    response = world.service.post("/api/v1/accounts", body, content_type="application/json")
    assert_envelope(response, 400, "invalid_arguments")


def test_repeated_filter_key_on_a_list_is_invalid_arguments(world):
    response = world.service.get("/api/v1/accounts?displayName=a&displayName=b")
    error = assert_envelope(response, 400, "invalid_arguments")
    assert error["details"]["fields"] == {"displayName": ["Given more than once."]}


def test_upper_case_ids_in_paths_are_accepted(world):
    message = factories.post(world.private, world.alice, "sample status")
    upper = str(message.id).upper()
    assert world.agent_api.get(f"/api/v1/messages/{upper}").json()["id"] == str(message.id)
    conversation = world.service.get(f"/api/v1/conversations/{str(world.private.id).upper()}")
    assert conversation.json()["id"] == str(world.private.id)


def test_unknown_api_path_is_json_even_under_debug(world, settings):
    settings.DEBUG = True
    response = world.agent_api.get("/api/v9/anything")
    assert_envelope(response, 404, "not_found")
    assert b"urlpatterns" not in response.content


def test_django_level_errors_render_like_drf(world):
    """The same bytes whichever layer answered: compact JSON, same keys."""
    django_level = world.agent_api.get("/api/v1/no-such-thing").content
    drf_level = world.agent_api.get(f"/api/v1/messages/{world.agent.id}").content
    assert django_level == drf_level
