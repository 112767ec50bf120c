"""A configuration error stops gunicorn at once (issue 42): its master runs the settings module
before it starts a worker (formation/gunicorn_conf.py, ``on_starting``), so a bad value is the
sentence ``manage.py check --deploy`` prints, printed once, and a non-zero exit. Before, every
worker printed it and exited with status 1, and gunicorn started another one forever.

Each case runs the real gunicorn with the project's configuration on a free loopback port, in
the production environment of tests/test_serving.py plus the bad value.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from gunicorn.errors import AppImportError

from formation import environment, serving
from tests.test_serving import (
    GUNICORN_CONFIG,
    PROJECT_DIR,
    database_url,
    gunicorn_serving,
    production_env,
    run_python,
)

GUNICORN = str(Path(sys.executable).with_name("gunicorn"))
# gunicorn must have exited by then; a refusal takes about a second.
EXIT_WITHIN_SECONDS = 10


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def run_gunicorn(*extra_args: str, **overrides: str | None) -> subprocess.CompletedProcess[str]:
    """gunicorn in the production environment plus ``overrides``, waited for at most
    EXIT_WITHIN_SECONDS: still running then fails the test (after stopping it by its id)."""
    env = production_env(
        GUNICORN_BIND=f"127.0.0.1:{free_port()}", ALLOWED_HOSTS="127.0.0.1", **overrides
    )
    args = [GUNICORN, "--config", GUNICORN_CONFIG, *extra_args]
    process = subprocess.Popen(
        args, cwd=PROJECT_DIR, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        stdout, stderr = process.communicate(timeout=EXIT_WITHIN_SECONDS)
    except subprocess.TimeoutExpired:
        process.terminate()
        try:
            stdout, stderr = process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            stdout, stderr = process.communicate(timeout=30)
        raise AssertionError(
            f"gunicorn still running after {EXIT_WITHIN_SECONDS} s: {stderr[-1500:]}"
        ) from None
    return subprocess.CompletedProcess(args, process.returncode, stdout, stderr)


def check_deploy_refusal(**overrides: str | None) -> str:
    """The one-line refusal of ``manage.py check --deploy`` with ``overrides``."""
    result = run_python(["manage.py", "check", "--deploy"], **overrides)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    message = result.stderr.strip()
    assert len(message.splitlines()) == 1, message
    return message


# One bad value per rule of formation/settings.py (and a reader of formation/environment.py).
BAD_SETTINGS = {
    "no-secret-key": {"SECRET_KEY": None},
    "no-audit-keys": {"SEARCH_AUDIT_KEYS": None},
    "short-audit-key": {"SEARCH_AUDIT_KEYS": "k1:short"},
    "short-metrics-token": {"METRICS_TOKEN": "x"},
    "max-age-and-pool": {"CONN_MAX_AGE": "60"},
    "pool-min-over-max": {"DATABASE_POOL_MIN_SIZE": "5", "DATABASE_POOL_MAX_SIZE": "2"},
    "pool-timeout-not-a-number": {"DATABASE_POOL_TIMEOUT": "soon"},
    "negative-statement-timeout": {"API_STATEMENT_TIMEOUT_MS": "-1"},
    "rate": {"RATE_LIMIT_AGENT": "lots"},
    "body-size-not-a-number": {"MAX_REQUEST_BODY_BYTES": "32MB"},
    "body-buffer-below-body-size": {"REQUEST_BODY_BUFFER_BYTES": "1024"},
    "log-level": {"LOG_LEVEL": "loud"},
    "database-url-scheme": {"DATABASE_URL": "mysql://formation@db.internal/formation"},
    "database-url-port": {"DATABASE_URL": "postgresql://formation@db.internal:port/formation"},
    "redis-url": {"REDIS_URL": "localhost:6379"},
}


@pytest.mark.parametrize("overrides", BAD_SETTINGS.values(), ids=BAD_SETTINGS.keys())
def test_gunicorn_stops_at_once_on_a_setting_check_deploy_refuses(overrides):
    message = check_deploy_refusal(**overrides)
    result = run_gunicorn(**overrides)
    assert result.returncode != 0
    assert result.stderr.count(message) == 1, result.stderr[-1500:]
    assert "Traceback" not in result.stderr
    # Refused before it listened: no worker was ever started.
    assert "Listening at" not in result.stderr
    assert "Booting worker" not in result.stderr


@pytest.mark.parametrize(
    "overrides",
    [
        {"WEB_CONCURRENCY": "0"},
        {"GUNICORN_THREADS": "0"},
        {"GUNICORN_TIMEOUT": "soon"},
        {"GUNICORN_KEEPALIVE": "-1"},
    ],
    ids=["no-workers", "no-threads", "timeout", "keepalive"],
)
def test_gunicorn_refuses_its_own_bad_values_in_one_sentence(overrides, monkeypatch):
    (name, value), *_ = overrides.items()
    monkeypatch.setenv(name, value)
    minimum = 1 if name in {"WEB_CONCURRENCY", "GUNICORN_THREADS"} else 0
    with pytest.raises(SystemExit) as refusal:
        environment.env_int(name, 1, minimum=minimum)
    message = str(refusal.value)
    result = run_gunicorn(**overrides)
    assert result.returncode != 0
    assert result.stderr.count(message) == 1, result.stderr[-1500:]
    assert "Traceback" not in result.stderr


def test_a_refusal_only_a_worker_meets_still_stops_gunicorn(tmp_path):
    """Past the master's check (here: a configuration without it), a worker's refusal is an
    application that fails to load (status 4), which stops gunicorn, not an exit with status 1,
    which gunicorn answers with another worker; the worker's exit hook does not load the
    settings again (it printed the message a second time and exited 1)."""
    (tmp_path / "conf_without_master_check.py").write_text(
        "from formation.gunicorn_conf import *  # noqa: F403\n\n\n"
        "def on_starting(server):\n    pass\n"
    )
    result = run_gunicorn(
        "--config",
        "python:conf_without_master_check",
        "--workers",
        "1",
        PYTHONPATH=str(tmp_path),
        METRICS_TOKEN="x",
    )
    message = check_deploy_refusal(METRICS_TOKEN="x")
    assert result.returncode == 4, result.stderr[-1500:]
    assert result.stderr.count(message) == 1, result.stderr[-1500:]
    assert "App failed to load" in result.stderr


def test_the_worker_turns_a_refusal_into_an_application_load_error():
    def refusing() -> None:
        raise SystemExit("METRICS_TOKEN must be at least 16 characters (or unset: no /metrics).")

    worker = type("Worker", (), {"app": type("App", (), {"wsgi": staticmethod(refusing)})})()
    with pytest.raises(AppImportError) as error:
        serving.BoundedWorker.load_wsgi(worker)
    assert str(error.value).startswith("METRICS_TOKEN must be at least 16 characters")


@pytest.mark.django_db
def test_a_good_configuration_still_boots_and_answers():
    with gunicorn_serving(DATABASE_URL=database_url(), METRICS_TOKEN="m" * 24) as base_url:
        with urllib.request.urlopen(f"{base_url}/healthz", timeout=5) as response:
            assert response.status == 200
        request = urllib.request.Request(
            f"{base_url}/metrics", headers={"Authorization": f"Bearer {'m' * 24}"}
        )
        with urllib.request.urlopen(request, timeout=5) as response:
            assert response.status == 200
