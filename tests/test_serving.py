"""Production serving: the connection pool, the API statement timeout, static files, gunicorn's
configuration and ``check --deploy``.

Settings-level cases run in a fresh interpreter with the real ``formation.settings`` (as in
tests/test_settings.py), against a dummy DATABASE_URL that nothing connects to.
``gunicorn_serving`` starts a real gunicorn for tests that must see it answer (tests/test_mcp.py).
"""

from __future__ import annotations

import importlib
import json
import secrets
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import pytest
from django.conf import settings as django_settings
from django.core.management import call_command
from django.db import OperationalError, connection, transaction
from django.test import Client, RequestFactory

import formation.settings as production_settings
from formation import db_timeouts, errors
from messages_app import selectors
from tests import factories
from tests.helpers import child_environment, project_python

PROJECT_DIR = Path(__file__).resolve().parent.parent
GUNICORN_CONFIG = "python:formation.gunicorn_conf"
DUMMY_DATABASE_URL = "postgresql://nobody@localhost:1/nothing"
PRODUCTION_ENV = {
    "SECRET_KEY": "a-long-random-test-only-value-0123456789abcdefghij",
    "SEARCH_AUDIT_KEYS": "k1:test-only-audit-key-0123456",
    "DATABASE_URL": DUMMY_DATABASE_URL,
}


# The variables the production settings read, dropped from a child's environment first.
SETTINGS_VARIABLES = {"SECRET_KEY", "DEBUG", "DJANGO_SETTINGS_MODULE", "SEARCH_AUDIT_KEYS"}
SETTINGS_PREFIXES = ("DATABASE_", "API_STATEMENT", "RATE_LIMIT", "SECURE_", "CONN_")


def production_env(**overrides: str | None) -> dict[str, str]:
    """This process's environment with the production settings' variables, plus ``overrides``
    (``None`` removes one)."""
    return child_environment(
        without=SETTINGS_VARIABLES, prefixes=SETTINGS_PREFIXES, **{**PRODUCTION_ENV, **overrides}
    )


def database_url() -> str:
    """A URL of the test database, for a process of its own (the socket's trust login)."""
    db = connection.settings_dict
    url = f"postgresql://{db['USER']}@/{db['NAME']}?host={db['HOST'] or db['OPTIONS']['host']}"
    port = db["PORT"] or db["OPTIONS"].get("port")
    if port:
        url += f"&port={port}"
    return url


def run_python(args: list[str], **overrides: str | None) -> subprocess.CompletedProcess[str]:
    """``python <args>`` in the project with the production environment plus ``overrides``."""
    return project_python(
        args,
        without=SETTINGS_VARIABLES,
        prefixes=SETTINGS_PREFIXES,
        **{**PRODUCTION_ENV, **overrides},
    )


def production_setting(expression: str, **overrides: str | None) -> object:
    """The value of a settings expression, e.g. ``DATABASES['default']['OPTIONS']``."""
    code = (
        "import json, os; os.environ['DJANGO_SETTINGS_MODULE'] = 'formation.settings'; "
        "from django.conf import settings as s; "
        f"print(json.dumps(s.{expression}, default=str))"
    )
    result = run_python(["-c", code], **overrides)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def refusal(**overrides: str | None) -> str:
    """The one-sentence refusal of settings that must not start."""
    result = run_python(["manage.py", "check"], **overrides)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    message = result.stderr.strip()
    assert len(message.splitlines()) == 1
    return message


# --- connection pool ---------------------------------------------------------------------------


def test_pool_is_on_by_default_and_sized_from_the_environment():
    options = production_setting("DATABASES['default']['OPTIONS']")
    assert options["pool"] == {"min_size": 2, "max_size": 4, "timeout": 5}
    assert production_setting("DATABASES['default']['CONN_MAX_AGE']") == 0
    sized = production_setting(
        "DATABASES['default']['OPTIONS']['pool']",
        DATABASE_POOL_MIN_SIZE="1",
        DATABASE_POOL_MAX_SIZE="8",
        DATABASE_POOL_TIMEOUT="3",
    )
    assert sized == {"min_size": 1, "max_size": 8, "timeout": 3}


def test_pool_can_be_turned_off_for_an_external_pooler():
    database = production_setting("DATABASES['default']", DATABASE_POOL="0", CONN_MAX_AGE="30")
    assert "pool" not in database.get("OPTIONS", {})
    assert database["CONN_MAX_AGE"] == 30


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"CONN_MAX_AGE": "60"}, "CONN_MAX_AGE"),
        ({"DATABASE_POOL_MIN_SIZE": "5", "DATABASE_POOL_MAX_SIZE": "2"}, "DATABASE_POOL_MIN_SIZE"),
        ({"DATABASE_POOL_MAX_SIZE": "0"}, "DATABASE_POOL_MAX_SIZE"),
        ({"DATABASE_POOL_TIMEOUT": "soon"}, "DATABASE_POOL_TIMEOUT"),
        ({"API_STATEMENT_TIMEOUT_MS": "-1"}, "API_STATEMENT_TIMEOUT_MS"),
        ({"RATE_LIMIT_AGENT": "lots"}, "RATE_LIMIT_AGENT"),
        ({"RATE_LIMIT_SERVICE": "10/fortnight"}, "RATE_LIMIT_SERVICE"),
        ({"REQUEST_BODY_TIMEOUT": "0"}, "REQUEST_BODY_TIMEOUT"),
    ],
    ids=[
        "max-age-and-pool",
        "min-over-max",
        "empty-pool",
        "timeout",
        "statement",
        "rate",
        "period",
        "body-deadline",
    ],
)
def test_bad_serving_settings_refuse_to_start_with_one_sentence(overrides, named):
    assert named in refusal(**overrides)


def test_rates_and_statement_timeout_come_from_the_environment():
    assert production_setting(
        "REST_FRAMEWORK['DEFAULT_THROTTLE_RATES']",
        RATE_LIMIT_SERVICE="10/s",
        RATE_LIMIT_AGENT="off",
    ) == {"service": "10/s", "agent": None}
    assert production_setting("API_STATEMENT_TIMEOUT_MS") == 10_000
    assert production_setting("API_STATEMENT_TIMEOUT_MS", API_STATEMENT_TIMEOUT_MS="750") == 750


@pytest.mark.django_db
def test_the_test_suite_runs_on_the_pool():
    assert django_settings.DATABASES["default"]["CONN_MAX_AGE"] == 0
    assert connection.pool is not None
    assert connection.pool.max_size == 16  # formation/settings_test.py


@pytest.mark.django_db(transaction=True)
def test_pool_lends_each_thread_its_own_connection():
    """Eight threads hold a connection at once, as the concurrency tests do."""
    holding = threading.Barrier(8)
    pids: list[int] = []

    def work(index: int) -> None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            pids.append(cursor.fetchone()[0])
        holding.wait(timeout=30)

    assert factories.run_in_threads(8, work) == []
    assert len(set(pids)) == 8


# --- statement timeout for API requests ---------------------------------------------------------


def current_statement_timeout() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW statement_timeout")
        return cursor.fetchone()[0]


@pytest.mark.django_db
def test_api_requests_run_under_the_timeout_and_reset_it(world, settings, monkeypatch):
    settings.API_STATEMENT_TIMEOUT_MS = 250
    seen = []
    real = selectors.message_get

    def spy(**kwargs):
        seen.append(current_statement_timeout())
        return real(**kwargs)

    monkeypatch.setattr(selectors, "message_get", spy)
    message = factories.post(world.private, world.alice)
    assert world.agent_api.get(f"/api/v1/messages/{message.id}").status_code == 200
    assert seen == ["250ms"]
    assert current_statement_timeout() == "0"


@pytest.mark.django_db
def test_a_statement_past_the_timeout_is_503_unavailable(world, settings, monkeypatch):
    settings.API_STATEMENT_TIMEOUT_MS = 100

    def slow(**kwargs):
        # A savepoint, as a service's atomic block would hold: the test's own transaction
        # survives the cancelled statement.
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SELECT pg_sleep(5)")

    monkeypatch.setattr(selectors, "message_get", slow)
    started = time.monotonic()
    response = world.agent_api.get(f"/api/v1/messages/{world.agent.id}")
    assert time.monotonic() - started < 4
    assert response.status_code == 503
    assert response.json() == {
        "error": {
            "code": "unavailable",
            "message": "The request took too long and was cancelled; retry or narrow it.",
            "details": {},
        }
    }
    assert current_statement_timeout() == "0"


@pytest.mark.django_db(transaction=True)
def test_a_connection_whose_timeout_cannot_be_reset_is_discarded():
    """Never handed back to the pool still limited (no enclosing transaction, as in production)."""
    db_timeouts.set_statement_timeout(123)
    raw = connection.connection

    def refuse_reset(execute, sql, params, many, context):
        if sql.startswith("RESET"):
            raise OperationalError("reset refused")
        return execute(sql, params, many, context)

    with connection.execute_wrapper(refuse_reset):
        db_timeouts.reset_statement_timeout()
    assert raw.closed
    assert current_statement_timeout() == "0"


@pytest.mark.django_db
def test_requests_outside_the_api_are_not_bounded(settings, monkeypatch):
    settings.API_STATEMENT_TIMEOUT_MS = 100
    calls = []
    monkeypatch.setattr(db_timeouts, "set_statement_timeout", calls.append)
    assert Client().get("/readyz").status_code == 200
    assert Client().get("/admin/login/").status_code == 200
    assert calls == []


@pytest.mark.django_db
def test_zero_turns_the_timeout_off(world, settings, monkeypatch):
    settings.API_STATEMENT_TIMEOUT_MS = 0
    calls = []
    monkeypatch.setattr(db_timeouts, "set_statement_timeout", calls.append)
    assert world.service.get("/api/v1/accounts").status_code == 200
    assert calls == []


@pytest.mark.django_db
def test_management_commands_never_get_the_timeout():
    """A command in its own process, configured with a 1 ms API timeout, runs unbounded."""
    code = (
        "import os, django; os.environ['DJANGO_SETTINGS_MODULE'] = 'formation.settings'; "
        "django.setup(); from django.core.management import call_command; "
        "from django.db import connection; "
        "call_command('rebuild_search_documents', '--check', verbosity=0); "
        "cursor = connection.cursor(); cursor.execute('SHOW statement_timeout'); "
        "print(cursor.fetchone()[0])"
    )
    result = run_python(["-c", code], DATABASE_URL=database_url(), API_STATEMENT_TIMEOUT_MS="1")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "0"


@pytest.mark.django_db
def test_database_down_at_request_start_is_503_unavailable(world, monkeypatch):
    def down(milliseconds: int) -> None:
        raise OperationalError("connection refused")

    monkeypatch.setattr(db_timeouts, "set_statement_timeout", down)
    response = world.agent_api.get(f"/api/v1/messages/{world.agent.id}")
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "unavailable"


def test_an_outage_reaching_django_handler500_is_still_503():
    request = RequestFactory().get("/api/v1/messages")
    try:
        raise OperationalError("server closed the connection unexpectedly")
    except OperationalError:
        response = errors.server_error_view(request)
    assert response.status_code == 503
    assert json.loads(response.content)["error"]["code"] == "unavailable"


# --- static files --------------------------------------------------------------------------------


def test_whitenoise_serves_static_files_right_after_security():
    middleware = production_settings.MIDDLEWARE
    security = middleware.index("django.middleware.security.SecurityMiddleware")
    assert middleware[security + 1] == "whitenoise.middleware.WhiteNoiseMiddleware"
    assert middleware[0] == "formation.request_logging.RequestLogMiddleware"
    assert middleware[-1] == "formation.db_timeouts.StatementTimeoutMiddleware"
    assert production_settings.STORAGES["staticfiles"]["BACKEND"] == (
        "whitenoise.storage.CompressedManifestStaticFilesStorage"
    )


def test_collectstatic_and_whitenoise_serve_the_admin_css(settings, tmp_path):
    settings.STATIC_ROOT = tmp_path
    settings.STORAGES = production_settings.STORAGES
    settings.WHITENOISE_AUTOREFRESH = False
    call_command("collectstatic", interactive=False, verbosity=0)
    manifest = json.loads((tmp_path / "staticfiles.json").read_text())
    hashed = manifest["paths"]["admin/css/base.css"]
    assert (tmp_path / f"{hashed}.gz").exists()

    response = Client().get(f"/static/{hashed}", HTTP_ACCEPT_ENCODING="gzip")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/css")
    assert response["Content-Encoding"] == "gzip"
    assert "immutable" in response["Cache-Control"]


# --- gunicorn ------------------------------------------------------------------------------------


def test_gunicorn_configuration(monkeypatch):
    monkeypatch.setenv("GUNICORN_BIND", "0.0.0.0:8000, unix:/run/formation.sock")
    monkeypatch.setenv("GUNICORN_THREADS", "6")
    from formation import gunicorn_conf

    conf = importlib.reload(gunicorn_conf)
    assert conf.wsgi_app == "formation.wsgi:application"
    assert conf.bind == ["0.0.0.0:8000", "unix:/run/formation.sock"]
    assert (conf.worker_class, conf.workers, conf.threads) == (
        "formation.serving.BoundedWorker",
        2,
        6,
    )
    assert conf.graceful_timeout <= conf.timeout
    assert conf.accesslog is None
    assert conf.logger_class._compute_access_log_enabled(None) is False


def test_gunicorn_accepts_the_longest_valid_query_string():
    """A 500-character search of 4-byte characters must reach the API (and its JSON errors),
    not stop at gunicorn's request-line limit with an HTML 414."""
    from urllib.parse import urlencode

    from formation import gunicorn_conf
    from messages_app.limits import MAX_QUERY_CHARS

    query = urlencode({"query": "😀" * MAX_QUERY_CHARS, "conversationId": str(uuid.uuid4())})
    line = f"GET /api/v1/messages/search?{query}&limit=100 HTTP/1.1"
    assert len(line.encode()) <= gunicorn_conf.limit_request_line


@contextmanager
def gunicorn_serving(**overrides: str) -> Iterator[str]:
    """A real gunicorn with ``formation/gunicorn_conf.py`` on a free loopback port, in the
    production environment plus ``overrides``: yields its base URL once ``/readyz`` answers, and
    stops it by its process id."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = production_env(
        GUNICORN_BIND=f"127.0.0.1:{port}", ALLOWED_HOSTS="127.0.0.1", LOG_LEVEL="WARNING"
    )
    env.update(overrides)
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(
            [str(Path(sys.executable).with_name("gunicorn")), "--config", GUNICORN_CONFIG],
            cwd=PROJECT_DIR,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            _wait_until_ready(url, process, log)
            yield url
        finally:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_until_ready(url: str, process: subprocess.Popen, log: IO[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None:
        try:
            with urllib.request.urlopen(f"{url}/readyz", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    log.seek(0)
    raise AssertionError(f"gunicorn did not become ready: {log.read()[-2000:]!r}")


def test_gunicorn_loads_the_application_with_this_configuration():
    gunicorn = Path(sys.executable).with_name("gunicorn")
    result = run_python(
        [str(gunicorn), "--check-config", "--config", GUNICORN_CONFIG],
        ALLOWED_HOSTS="formation.example.com",
    )
    assert result.returncode == 0, result.stderr


# --- manage.py check --deploy ---------------------------------------------------------------------

DEPLOY_ENV = {
    "SECRET_KEY": secrets.token_urlsafe(50),
    "ALLOWED_HOSTS": "formation.example.com",
    "CSRF_TRUSTED_ORIGINS": "https://formation.example.com",
    "USE_X_FORWARDED_PROTO": "1",
    "SECURE_SSL_REDIRECT": "1",
    "SECURE_HSTS_SECONDS": "31536000",
    "SECURE_HSTS_INCLUDE_SUBDOMAINS": "1",
    "SECURE_HSTS_PRELOAD": "1",
}


def check_deploy(**overrides: str | None) -> subprocess.CompletedProcess[str]:
    return run_python(
        ["manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        **{**DEPLOY_ENV, **overrides},
    )


def test_check_deploy_is_clean_with_production_settings():
    result = check_deploy()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues (0 silenced)." in result.stdout


def test_check_deploy_names_what_is_missing():
    """One run with four gaps (one interpreter start instead of four)."""
    result = check_deploy(
        SECURE_HSTS_SECONDS=None, SECURE_SSL_REDIRECT=None, SECRET_KEY="short-but-set", DEBUG="1"
    )
    assert result.returncode != 0
    output = result.stderr + result.stdout
    for warning in ("security.W004", "security.W008", "security.W009", "security.W018"):
        assert warning in output
