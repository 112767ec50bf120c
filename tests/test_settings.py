"""Production settings refuse to start without SECRET_KEY unless DEBUG=1 (formation/settings.py).

Each case runs ``manage.py check`` in a fresh interpreter with the real ``formation.settings``
(not the test settings, which supply a key). DATABASE_URL is set to a dummy server so no
embedded cluster is started; ``check`` does not connect to the database.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

PROJECT_DIR = Path(__file__).resolve().parent.parent
DUMMY_DATABASE_URL = "postgresql://nobody@localhost:1/nothing"


def manage_check(**overrides: str | None) -> subprocess.CompletedProcess[str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"SECRET_KEY", "DEBUG", "DJANGO_SETTINGS_MODULE"}
    }
    env["DATABASE_URL"] = DUMMY_DATABASE_URL
    for key, value in overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=PROJECT_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
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
