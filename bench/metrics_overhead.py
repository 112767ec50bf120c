"""What the metrics cost one get_message: in-process, with METRICS on and off, interleaved.

    .venv/bin/python manage.py migrate && .venv/bin/python bench/metrics_overhead.py [--pairs 3000]

Each pair hands the same ``GET /api/v1/messages/{id}`` (an agent token) to Django's WSGI handler
twice, once with ``METRICS_ENABLED`` and once without, in alternating order (so neither side
always runs second), after an untimed warm-up. The machine is shared and drifts over seconds, so
the figure that counts is the median of the per-pair differences; the two medians are printed
too. Because a loaded machine's noise (a millisecond or more per request) can hide a cost of
microseconds, it also times, alone, exactly the metric calls one get_message makes (request
counter and histogram, tool counter and histogram, the pool's once-a-second check). It writes
a workspace, an agent, a message and a token to the database it runs on (the
embedded development cluster unless DATABASE_URL says otherwise); all text is synthetic.

``--multiprocess`` measures the values gunicorn's workers keep (memory-mapped files in a
temporary PROMETHEUS_MULTIPROC_DIR) instead of this process's.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3000, help="timed on/off pairs")
    parser.add_argument("--warmup", type=int, default=300, help="untimed requests first")
    parser.add_argument(
        "--multiprocess", action="store_true", help="gunicorn's memory-mapped values"
    )
    args = parser.parse_args()
    if args.multiprocess:
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="formation-bench-")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "formation.settings_test")
    # The rates are not what is measured.
    os.environ["RATE_LIMIT_AGENT"] = "off"

    import django

    django.setup()
    from django.conf import settings
    from django.core.handlers.wsgi import WSGIHandler

    from messages_app import services
    from messages_app.models import TokenKind

    workspace = services.workspace_create(slug=f"bench-metrics-{time.time_ns()}")
    agent = services.agent_create(workspace_id=workspace.id, name="bench agent")
    person = services.account_create(workspace_id=workspace.id, display_name="Sample Person")
    room = services.conversation_create(workspace_id=workspace.id, kind="private", title="bench")
    services.membership_join(conversation=room, agent_id=agent.id)
    services.membership_join(conversation=room, account_id=person.id)
    message = services.message_create(
        conversation=room,
        draft=services.MessageDraft(content="sample status", sender_account_id=person.id),
    )
    _, token = services.token_create(workspace_id=workspace.id, kind=TokenKind.AGENT, agent=agent)

    app = WSGIHandler()

    def get_message() -> float:
        environ = {
            "REQUEST_METHOD": "GET",
            "PATH_INFO": f"/api/v1/messages/{message.id}",
            "QUERY_STRING": "",
            "SERVER_NAME": "127.0.0.1",
            "SERVER_PORT": "80",
            "HTTP_HOST": "127.0.0.1",
            "HTTP_AUTHORIZATION": f"Bearer {token}",
            "wsgi.url_scheme": "http",
            "wsgi.input": io.BytesIO(b""),
            "wsgi.errors": sys.stderr,
        }
        started = time.perf_counter()
        statuses = []
        body = b"".join(app(environ, lambda status, headers: statuses.append(status)))
        elapsed = time.perf_counter() - started
        assert statuses[0].startswith("200"), (statuses, body[:200])
        return elapsed

    def timed(enabled: bool) -> float:
        settings.METRICS_ENABLED = enabled
        return get_message()

    # The request log's lines are not what is measured either.
    import logging

    logging.disable(logging.INFO)
    for index in range(args.warmup):
        timed(index % 2 == 0)
    on: list[float] = []
    off: list[float] = []
    for index in range(args.pairs):
        if index % 2:
            off.append(timed(False))
            on.append(timed(True))
        else:
            on.append(timed(True))
            off.append(timed(False))
    differences = sorted(a - b for a, b in zip(on, off, strict=True))
    mode = "multiprocess (memory-mapped files)" if args.multiprocess else "single process"
    print(f"get_message in-process, {args.pairs} interleaved pairs, metrics values: {mode}")
    print(f"  median with metrics:    {statistics.median(on) * 1000:.3f} ms")
    print(f"  median without:         {statistics.median(off) * 1000:.3f} ms")
    print(f"  median pair difference: {statistics.median(differences) * 1000:+.4f} ms")
    p25, p75 = differences[len(differences) // 4], differences[3 * len(differences) // 4]
    print(f"  pair difference IQR:    {p25 * 1000:+.4f} .. {p75 * 1000:+.4f} ms")
    print(f"  the metric calls alone: {metric_calls_alone() * 1e6:.1f} us per request")


def metric_calls_alone(rounds: int = 20, each: int = 5000) -> float:
    """The median over ``rounds`` of the time per request of what a get_message records."""
    from formation import metrics

    endpoint = "api/v1/messages/<id:message_id>"
    per_request = []
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(each):
            metrics.REQUESTS.labels(endpoint, "GET", "200").inc()
            metrics.REQUEST_SECONDS.labels(endpoint).observe(0.004)
            metrics.sample_pool()
            metrics.TOOL_CALLS.labels("get_message", "ok").inc()
            metrics.TOOL_SECONDS.labels("get_message").observe(0.003)
        per_request.append((time.perf_counter() - started) / each)
    return statistics.median(per_request)


if __name__ == "__main__":
    main()
