"""Two gunicorn workers (formation/gunicorn_conf.py, as ``make serve`` starts it): their metrics
add up in one scrape, and a token's rate, counted in a private redis-server, holds across them.
"""

from __future__ import annotations

import concurrent.futures
from pathlib import Path

import httpx
import pytest
from prometheus_client.multiprocess import MultiProcessCollector

from messages_app import services
from messages_app.models import TokenKind
from tests import factories
from tests.redis_server import running_redis
from tests.test_slow_clients import gunicorn_log, running_gunicorn

METRICS_TOKEN = "metrics-test-token-0123456789"
RATE = 25
ROUNDS, BURST = 8, 16


@pytest.fixture
def served(transactional_db, tmp_path: Path):
    """Committed data: an agent token and one of its messages."""
    workspace = factories.make_workspace()
    agent = factories.make_agent(workspace)
    alice = factories.make_account(workspace, "Alice Example")
    room = factories.make_conversation(workspace)
    factories.join(room, agent)
    factories.join(room, alice)
    message = factories.post(room, alice, "sample status")
    _, token = services.token_create(workspace_id=workspace.id, kind=TokenKind.AGENT, agent=agent)
    return token, str(message.id)


def requests_by_worker(folder: Path, endpoint: str) -> dict[str, float]:
    """Each worker's own count of ``endpoint``'s requests, from its file in the folder."""
    counts = {}
    for path in folder.glob("counter_*.db"):
        total = 0.0
        for family in MultiProcessCollector.merge([str(path)], accumulate=True):
            for sample in family.samples:
                if (
                    sample.name == "formation_http_requests_total"
                    and sample.labels["endpoint"] == endpoint
                ):
                    total += sample.value
        counts[path.stem.removeprefix("counter_")] = total
    return counts


def scraped(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if not line.startswith((name + "{", name + " ")):
            continue
        if all(f'{key}="{value}"' in line for key, value in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def fire(base_url: str, token: str, message_id: str, count: int) -> list[int]:
    """``count`` get_message calls at once, each on a connection of its own (so the two
    workers share them); their statuses."""

    def one(_: int) -> int:
        return httpx.get(
            f"{base_url}/api/v1/messages/{message_id}",
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
        ).status_code

    with concurrent.futures.ThreadPoolExecutor(BURST) as pool:
        return list(pool.map(one, range(count)))


def test_two_workers_add_up_and_share_one_rate(served, tmp_path: Path):
    token, message_id = served
    folder = tmp_path / "metrics"
    endpoint = "api/v1/messages/<id:message_id>"
    with (
        running_redis() as redis,
        running_gunicorn(
            tmp_path,
            WEB_CONCURRENCY="2",
            PROMETHEUS_MULTIPROC_DIR=str(folder),
            METRICS_TOKEN=METRICS_TOKEN,
            REDIS_URL=redis.url,
            # A day's window: the test never straddles two.
            RATE_LIMIT_AGENT=f"{RATE}/day",
        ) as (_, port),
    ):
        base_url = f"http://127.0.0.1:{port}"
        statuses: list[int] = []
        for _ in range(ROUNDS):
            statuses += fire(base_url, token, message_id, BURST)
            served_by = requests_by_worker(folder, endpoint)
            if len([n for n in served_by.values() if n]) >= 2 and len(statuses) > 2 * RATE:
                break
        scrape = httpx.get(
            f"{base_url}/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}
        )
        unauthorized = httpx.get(f"{base_url}/metrics")

    served_by = requests_by_worker(folder, endpoint)
    assert len([n for n in served_by.values() if n]) == 2, served_by
    # The rate holds across both workers: exactly RATE allowed, not RATE per worker.
    assert statuses.count(200) == RATE, statuses
    assert statuses.count(429) == len(statuses) - RATE
    # One scrape, answered by either worker, adds up both workers' counts.
    assert scrape.status_code == 200
    assert unauthorized.status_code == 401
    text = scrape.text
    assert scraped(text, "formation_http_requests_total", endpoint=endpoint) == len(statuses)
    assert sum(served_by.values()) == len(statuses)
    assert scraped(text, "formation_http_requests_total", endpoint=endpoint, status="200") == float(
        RATE
    )
    assert scraped(text, "formation_rate_limited_total", scope="agent") == len(statuses) - RATE
    assert scraped(text, "formation_tool_calls_total", tool="get_message", outcome="ok") == RATE
    assert scraped(text, "formation_tool_duration_seconds_count", tool="get_message") == RATE
    assert scraped(text, "formation_db_pool_connections") >= 1
    assert message_id not in text


def test_the_masters_own_folder_when_none_is_named(served, tmp_path: Path):
    """Without ``PROMETHEUS_MULTIPROC_DIR`` the master makes the folder; the workers must write
    their values into it, so the scrape carries the requests they served."""
    token, message_id = served
    endpoint = "api/v1/messages/<id:message_id>"
    with running_gunicorn(
        tmp_path, WEB_CONCURRENCY="2", PROMETHEUS_MULTIPROC_DIR=None, METRICS_TOKEN=METRICS_TOKEN
    ) as (_, port):
        base_url = f"http://127.0.0.1:{port}"
        statuses = fire(base_url, token, message_id, BURST)
        scrapes = [
            httpx.get(
                f"{base_url}/metrics",
                headers={"Authorization": f"Bearer {METRICS_TOKEN}"},
                timeout=30,
            )
            for _ in range(4)
        ]

    assert statuses == [200] * BURST, f"{statuses}{gunicorn_log(tmp_path)}"
    for scrape in scrapes:
        assert scrape.status_code == 200
        # Whichever worker answers, the scrape adds up every request of the burst.
        assert scraped(
            scrape.text, "formation_http_requests_total", endpoint=endpoint, status="200"
        ) == float(BURST), scrape.text[:2000] + gunicorn_log(tmp_path)
