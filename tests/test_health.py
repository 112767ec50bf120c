"""``/healthz`` (process up, no database) and ``/readyz`` (database reachable and migrated)."""

from __future__ import annotations

import pytest
from django.db import OperationalError, connection
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.recorder import MigrationRecorder
from django.test import Client
from django.urls import resolve

from formation import health


def test_healthz_needs_neither_token_nor_database():
    """No django_db mark: any query here would raise."""
    response = Client().get("/healthz")
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert response["Cache-Control"] == "no-store"
    assert response.json() == {"status": "ok"}
    assert response["X-Request-ID"]


def test_healthz_answers_head_and_refuses_writes():
    assert Client().head("/healthz").status_code == 200
    refused = Client().post("/healthz")
    assert refused.status_code == 405
    assert refused["Allow"] == "GET, HEAD"
    assert refused.json() == {"status": "method_not_allowed"}


@pytest.mark.django_db
def test_readyz_is_ok_on_a_migrated_database():
    response = Client().get("/readyz")
    assert response.status_code == 200
    assert response["Cache-Control"] == "no-store"
    assert response.json() == {"status": "ok", "checks": {"database": "ok", "migrations": "ok"}}


@pytest.mark.django_db
def test_readyz_is_503_while_a_migration_is_unapplied():
    app, name = sorted(MigrationLoader(connection).graph.leaf_nodes())[0]
    MigrationRecorder(connection).record_unapplied(app, name)  # rolled back with the test
    response = Client().get("/readyz")
    assert response.status_code == 503
    assert response.json() == {
        "status": "unavailable",
        "checks": {"database": "ok", "migrations": "pending", "pendingMigrations": 1},
    }


@pytest.mark.django_db
def test_readyz_is_503_when_the_database_fails(monkeypatch):
    def unreachable() -> int:
        raise OperationalError("connection to server failed")

    monkeypatch.setattr(health, "pending_migration_count", unreachable)
    response = Client().get("/readyz")
    assert response.status_code == 503
    assert response.json() == {"status": "unavailable", "checks": {"database": "unreachable"}}


@pytest.mark.django_db
def test_readyz_bounds_its_own_statements(monkeypatch):
    """A stuck database makes the probe fail fast rather than hang the prober."""
    seen = []
    real = health.pending_migration_count

    def spy() -> int:
        with connection.cursor() as cursor:
            cursor.execute("SHOW statement_timeout")
            seen.append(cursor.fetchone()[0])
        return real()

    monkeypatch.setattr(health, "pending_migration_count", spy)
    assert Client().get("/readyz").status_code == 200
    assert seen == ["2s"]
    with connection.cursor() as cursor:
        cursor.execute("SHOW statement_timeout")
        assert cursor.fetchone()[0] == "0"


def test_probes_live_outside_the_api_and_its_token_check():
    assert resolve("/healthz").func is health.healthz
    assert resolve("/readyz").func is health.readyz


def test_probes_are_not_redirected_to_https(settings):
    """Orchestrators probe over plain HTTP inside the network."""
    settings.SECURE_SSL_REDIRECT = True
    assert Client().get("/healthz").status_code == 200
    assert Client().get("/admin/login/").status_code == 301
