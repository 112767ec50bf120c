"""Production settings refuse to start without SECRET_KEY unless DEBUG=1 (formation/settings.py);
manage.py on the embedded cluster runs with make run's development defaults (manage.py).

Each case runs ``manage.py check`` in a fresh interpreter with the real ``formation.settings``
(not the test settings, which supply a key). DATABASE_URL is set to a dummy server so no
embedded cluster is started; ``check`` does not connect to the database.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.helpers import project_python

DUMMY_DATABASE_URL = "postgresql://nobody@localhost:1/nothing"


def manage_check(**overrides: str | None) -> subprocess.CompletedProcess[str]:
    return project_python(
        ["manage.py", "check"],
        without={"SECRET_KEY", "DEBUG", "DJANGO_SETTINGS_MODULE"},
        **{"DATABASE_URL": DUMMY_DATABASE_URL, **overrides},
    )


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"SECRET_KEY": ""},
        {"DEBUG": "0"},
        {"DEBUG": "false"},
        {"DEBUG": ""},
    ],
    ids=["unset", "empty-key", "debug-0", "debug-false", "debug-empty"],
)
def test_check_refuses_to_start_without_secret_key(overrides):
    result = manage_check(**overrides)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert "Traceback" not in result.stdout
    message = result.stderr.strip()
    assert "SECRET_KEY" in message
    assert len(message.splitlines()) == 1
    assert result.stdout == ""


@pytest.mark.parametrize("debug", ["1", "true"])
def test_check_runs_without_secret_key_in_debug(debug):
    result = manage_check(DEBUG=debug)
    assert result.returncode == 0, result.stderr
    assert "System check identified no issues" in result.stdout


def test_check_runs_with_a_secret_key_and_debug_off():
    result = manage_check(SECRET_KEY="a-long-random-test-only-value-0123456789abcdefghij")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "keys",
    [
        None,
        "",
        "no-colon-here",
        "k1:short",
        ":secret-without-an-id",
        "k1:0123456789abcdef,k1:fedcba9876543210",
    ],
    ids=["unset", "empty", "no-colon", "short-secret", "no-id", "duplicate-id"],
)
def test_check_refuses_to_start_without_valid_audit_keys(keys):
    result = manage_check(
        SECRET_KEY="a-long-random-test-only-value-0123456789abcdefghij", SEARCH_AUDIT_KEYS=keys
    )
    assert result.returncode != 0
    assert "SEARCH_AUDIT_KEYS" in result.stderr
    assert "Traceback" not in result.stderr


# --- the embedded default: manage.py runs as make run does, serving still needs secrets ------

SECRETS = {"SECRET_KEY", "SEARCH_AUDIT_KEYS", "DEBUG", "DATABASE_URL", "DJANGO_SETTINGS_MODULE"}


def on_the_embedded_default(args: list[str], **overrides: str) -> subprocess.CompletedProcess[str]:
    """``python <args>`` with DATABASE_URL unset (the embedded cluster) and no secrets at all."""
    return project_python(args, without=SECRETS, **overrides)


@pytest.mark.parametrize("style", ["openai", "anthropic", "mcp"])
def test_export_tools_runs_as_documented_on_the_embedded_default(style):
    result = on_the_embedded_default(["manage.py", "export_tools", "--format", style])
    assert result.returncode == 0, result.stderr
    assert len(json.loads(result.stdout)) == 4


@pytest.mark.parametrize(
    "command",
    [["check"], ["audit_digest", "migration plan"], ["showmigrations", "--list", "audit_app"]],
    ids=["check", "audit_digest", "showmigrations"],
)
def test_local_management_commands_run_on_the_embedded_default(command):
    result = on_the_embedded_default(["manage.py", *command])
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr


def test_manage_py_on_the_embedded_default_uses_make_runs_development_settings():
    show = "from django.conf import settings as s; print(s.DEBUG, s.SEARCH_AUDIT_KEYS[0][0])"
    result = on_the_embedded_default(["manage.py", "shell", "-v", "0", "-c", show])
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "dev"]


def test_an_explicit_debug_0_still_refuses_on_the_embedded_default():
    result = on_the_embedded_default(["manage.py", "check"], DEBUG="0")
    assert result.returncode != 0
    assert "SECRET_KEY" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("overrides", "missing"),
    [({}, "SECRET_KEY"), ({"SECRET_KEY": "a-long-random-test-only-value-0123456789abc"}, "AUDIT")],
    ids=["no-secret-key", "no-audit-keys"],
)
@pytest.mark.parametrize(
    "entry",
    [["-c", "import formation.wsgi"], ["-m", "gunicorn", "--check-config", "formation.wsgi"]],
    ids=["wsgi", "gunicorn"],
)
def test_serving_refuses_without_secrets_even_on_the_embedded_default(entry, overrides, missing):
    """Only manage.py gets development defaults: what serves HTTP keeps the production rules."""
    result = on_the_embedded_default(entry, **overrides)
    assert result.returncode != 0
    assert missing in result.stderr
    assert "Traceback" not in result.stderr
