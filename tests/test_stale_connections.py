"""A connection the server closed while it idled in the pool costs no request an error."""

from __future__ import annotations

import psycopg
import pytest
from django.db import connection

from formation import auth
from tests import factories


def _terminate_current_backend() -> None:
    """What a PostgreSQL restart does to an idle pooled connection, from another session."""
    pid = connection.connection.info.backend_pid
    settings = connection.get_connection_params()
    with psycopg.connect(**settings, autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s, 5000)", [pid])


@pytest.mark.django_db(transaction=True)
def test_a_dead_pooled_connection_is_replaced_before_the_request_reads_anything():
    _, agent, alice, public = factories.observed_public_room()
    factories.post(public, alice, "stale connection probe")
    client = factories.agent_client(agent)
    path = f"/api/v1/messages?conversationId={public.id}"
    assert client.get(path).status_code == 200
    dead = connection.connection
    _terminate_current_backend()

    response = client.get(path)

    assert response.status_code == 200, response.content
    assert [item["content"] for item in response.json()["items"]] == ["stale connection probe"]
    assert connection.connection is not dead
    with connection.cursor() as cursor:
        cursor.execute("SHOW statement_timeout")
        assert cursor.fetchone() == ("0",)  # reset after the request, on the new connection


@pytest.mark.django_db(transaction=True)
def test_a_database_that_stays_down_still_answers_503(monkeypatch):
    """The retry is one more attempt, not a loop: the second failure is the answer."""
    _, agent, _, public = factories.observed_public_room()
    client = factories.agent_client(agent)
    path = f"/api/v1/messages?conversationId={public.id}"
    assert client.get(path).status_code == 200
    attempts = []
    original = auth._caller_lookup()

    def always_dead(digest, workspace_id):
        attempts.append(digest)
        _terminate_current_backend()
        return original(digest, workspace_id)

    monkeypatch.setattr(auth, "_caller_lookup", lambda: always_dead)

    response = client.get(path)

    assert response.status_code == 503
    assert response.json()["error"]["code"] == "unavailable"
    assert len(attempts) == 2
