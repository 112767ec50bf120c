"""Readers of the environment's settings, shared by ``formation/settings.py`` and
``formation/gunicorn_conf.py``: each refuses a bad value with ``SystemExit`` and one sentence
naming the variable, which the process prints before it exits non-zero.

Nothing here imports Django: gunicorn's master reads its own settings with them before any
worker starts (see ``gunicorn_conf.on_starting``).
"""

from __future__ import annotations

import os

RATE_PERIODS = {"s", "sec", "second", "m", "min", "minute", "h", "hour", "d", "day"}


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def env_list(name: str, default: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


def env_int(name: str, default: int, minimum: int = 0) -> int:
    value = os.environ.get(name, "").strip() or str(default)
    if not value.isdigit() or int(value) < minimum:
        raise SystemExit(f"{name} must be a whole number of at least {minimum} (got {value!r}).")
    return int(value)


def env_rate(name: str, default: str) -> str | None:
    """A DRF throttle rate such as ``600/min`` (per s, min, hour or day); ``off`` means none."""
    value = os.environ.get(name, "").strip() or default
    if value.lower() == "off":
        return None
    count, _, period = value.partition("/")
    if not count.isdigit() or int(count) < 1 or period not in RATE_PERIODS:
        raise SystemExit(f"{name} must look like 600/min (per s, min, hour or day) or be off.")
    return value


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    """One of ``choices``, whatever its case (returned as spelled in ``choices``)."""
    value = os.environ.get(name, "").strip() or default
    for choice in choices:
        if value.upper() == choice.upper():
            return choice
    raise SystemExit(f"{name} must be one of {', '.join(choices)} (got {value!r}).")
