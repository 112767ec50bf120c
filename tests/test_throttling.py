"""Per-token rate limits: 429 ``rate_limited`` with ``retryAfter`` and a Retry-After header."""

from __future__ import annotations

import pytest
from django.conf import settings as django_settings

from formation.throttling import TokenRateThrottle, parse_rate
from messages_app import selectors
from tests import factories

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
