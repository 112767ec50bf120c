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
