"""Per-token rate limits: 429 ``rate_limited`` with ``retryAfter`` and a Retry-After header;
counted in Redis when one is configured, and let through when it is down.

tests/test_metrics_serving.py shows the rate holding across two gunicorn workers."""

from __future__ import annotations

import logging

import pytest
from django.conf import settings as django_settings
from prometheus_client import REGISTRY

from formation import throttling
from formation.throttling import TokenRateThrottle, parse_rate
from messages_app import selectors
from tests import factories
from tests.redis_server import running_redis

pytestmark = pytest.mark.django_db

# 40 s into a one-minute window: 20 s are left in it.
START = 1_800_000_000.0 - (1_800_000_000.0 % 60) + 40


class Clock:
    now = START


@pytest.fixture
def clock(monkeypatch):
    """Time stands still unless a test moves it, so no window ends mid-test."""
    clock = Clock()
    monkeypatch.setattr(TokenRateThrottle, "timer", staticmethod(lambda: clock.now))
    return clock


@pytest.fixture
def rates(settings, clock):
    def set_rates(service: str | None = "3/min", agent: str | None = "2/min") -> None:
        settings.REST_FRAMEWORK = {
            **settings.REST_FRAMEWORK,
            "DEFAULT_THROTTLE_RATES": {"service": service, "agent": agent},
        }

    return set_rates


def list_accounts(client):
    return client.get("/api/v1/accounts")


def list_messages(client, world):
    return client.get(f"/api/v1/messages?conversationId={world.private.id}")


def test_service_token_is_refused_past_its_rate(world, rates):
    rates(service="3/min")
    assert [list_accounts(world.service).status_code for _ in range(3)] == [200, 200, 200]
    refused = list_accounts(world.service)
    assert refused.status_code == 429
    assert refused.json() == {
        "error": {
            "code": "rate_limited",
            "message": "Too many requests for this token; retry after the given delay.",
            "details": {"retryAfter": 20},
        }
    }
    assert refused["Retry-After"] == "20"


def test_retry_after_rounds_up_to_whole_seconds(world, rates, clock):
    rates(service="1/min")
    clock.now = START + 19.2
    assert list_accounts(world.service).status_code == 200
    refused = list_accounts(world.service)
    assert refused.json()["error"]["details"] == {"retryAfter": 1}
    assert refused["Retry-After"] == "1"


def test_the_next_window_allows_the_token_again(world, rates, clock):
    rates(service="1/min")
    assert list_accounts(world.service).status_code == 200
    assert list_accounts(world.service).status_code == 429
    clock.now = START + 20
    assert list_accounts(world.service).status_code == 200


def test_each_token_has_its_own_budget(world, rates):
    """Agent and run tokens share a rate setting, not a counter; service tokens have theirs."""
    rates(service="5/min", agent="2/min")
    _, run_api = factories.make_run(world.agent, world.private, world.alice)
    second_agent_api = factories.agent_client(world.agent)

    assert [list_messages(world.agent_api, world).status_code for _ in range(3)] == [200, 200, 429]
    assert [list_messages(run_api, world).status_code for _ in range(3)] == [200, 200, 429]
    assert list_messages(second_agent_api, world).status_code == 200
    assert [list_accounts(world.service).status_code for _ in range(5)] == [200] * 5


def test_refused_requests_do_not_reach_the_view(world, rates, monkeypatch):
    rates(agent="1/min")
    assert list_messages(world.agent_api, world).status_code == 200

    def must_not_run(**kwargs):
        raise AssertionError("the view ran")

    monkeypatch.setattr(selectors, "message_list", must_not_run)
    assert list_messages(world.agent_api, world).status_code == 429


def test_off_means_no_limit(world, rates):
    rates(service=None, agent=None)
    assert {list_accounts(world.service).status_code for _ in range(30)} == {200}


def test_unauthenticated_requests_are_401_not_counted(world, rates):
    rates(service="1/min")
    bogus = factories.bearer_client("fmn_service_bogus")
    assert {list_accounts(bogus).status_code for _ in range(3)} == {401}
    assert list_accounts(world.service).status_code == 200


def test_defaults_are_generous():
    """The suite and the benchmarks must never meet them."""
    rates = django_settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]
    assert parse_rate(rates["service"]) == (6000, 60)
    assert parse_rate(rates["agent"]) == (1200, 60)
    assert django_settings.REST_FRAMEWORK["DEFAULT_THROTTLE_CLASSES"] == [
        "formation.throttling.TokenRateThrottle"
    ]


@pytest.mark.parametrize(
    ("rate", "parsed"),
    [("10/s", (10, 1)), ("600/min", (600, 60)), ("50/hour", (50, 3600)), ("7/day", (7, 86400))],
)
def test_rates_use_drf_notation(rate, parsed):
    assert parse_rate(rate) == parsed


# --- the shared store ---------------------------------------------------------------------


@pytest.fixture
def redis_throttle(settings, monkeypatch):
    """The throttle cache in a private redis-server, as REDIS_URL configures it."""
    monkeypatch.setattr(throttling, "_store", {"skip_until": 0.0, "warned_at": float("-inf")})
    with running_redis() as server:
        settings.CACHES = {
            **settings.CACHES,
            "throttle": {
                "BACKEND": "django.core.cache.backends.redis.RedisCache",
                "LOCATION": server.url,
                "OPTIONS": {"socket_connect_timeout": 0.25, "socket_timeout": 0.25},
            },
        }
        yield server


def store_errors() -> float:
    return REGISTRY.get_sample_value("formation_throttle_store_errors_total") or 0.0


def test_redis_counts_the_rate(world, rates, redis_throttle):
    from django.core.cache import caches

    rates(agent="3/min")
    codes = [list_messages(world.agent_api, world).status_code for _ in range(4)]
    assert codes == [200, 200, 200, 429]
    # The count (refusals included) is in Redis, where every worker and host sees it.
    assert [caches["throttle"].get(key) for key in _throttle_keys(redis_throttle)] == [4]


def _throttle_keys(server) -> list[str]:
    import redis

    client = redis.Redis.from_url(server.url)
    try:
        return [key.decode().split(":", 2)[2] for key in client.keys("*throttle:*")]
    finally:
        client.close()


def test_redis_down_fails_open_with_a_warning_and_a_metric(world, rates, redis_throttle, caplog):
    rates(agent="1/min")
    assert list_messages(world.agent_api, world).status_code == 200
    assert list_messages(world.agent_api, world).status_code == 429
    redis_throttle.stop()
    before = store_errors()
    with caplog.at_level(logging.WARNING, logger="formation.throttling"):
        codes = [list_messages(world.agent_api, world).status_code for _ in range(3)]
    assert codes == [200, 200, 200]
    assert store_errors() - before == 3
    warnings = [r for r in caplog.records if r.name == "formation.throttling"]
    # Once, not per request, and naming no token.
    assert len(warnings) == 1
    assert "throttle store unavailable" in warnings[0].getMessage()
    assert str(world.agent.id) not in warnings[0].getMessage()


def test_an_unreachable_store_never_answers_500(world, rates, settings, monkeypatch):
    monkeypatch.setattr(throttling, "_store", {"skip_until": 0.0, "warned_at": float("-inf")})
    settings.CACHES = {
        **settings.CACHES,
        "throttle": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": "unix:///nonexistent/formation-redis.sock",
        },
    }
    rates(service="1/min")
    assert {list_accounts(world.service).status_code for _ in range(3)} == {200}
