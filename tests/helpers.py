"""Helpers shared by test modules: Python in a subprocess of the project, the links of an HTML
page, and the variables a shell gets from pasting ``export`` lines."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable
from html.parser import HTMLParser
from pathlib import Path

PROJECT_DIR = Path(__file__).resolve().parent.parent


def child_environment(
    *, without: Iterable[str] = (), prefixes: tuple[str, ...] = (), **overrides: str | None
) -> dict[str, str]:
    """This process's environment minus the names in ``without`` (and those starting with
    ``prefixes``), then ``overrides`` (None removes one)."""
    dropped = set(without)
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in dropped and not (prefixes and key.startswith(prefixes))
    }
    for key, value in overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def project_python(
    args: list[str],
    *,
    without: Iterable[str] = (),
    prefixes: tuple[str, ...] = (),
    timeout: int = 120,
    **overrides: str | None,
) -> subprocess.CompletedProcess[str]:
    """``python <args>`` in the project, with ``child_environment``'s environment.

    Settings are read once per process, so a settings rule is only tested for real here."""
    return subprocess.run(
        [sys.executable, *args],
        cwd=PROJECT_DIR,
        env=child_environment(without=without, prefixes=prefixes, **overrides),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


class References(HTMLParser):
    """Every ``src`` and ``href`` of a page, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.found.extend(value or "" for name, value in attrs if name in {"src", "href"})


# What load_demo (so make run) exports, in its order.
EXPORTED_NAMES = (
    "FORMATION_URL",
    "SERVICE_TOKEN",
    "AGENT_ID",
    "AGENT_TOKEN",
    "RUN_ID",
    "RUN_TOKEN",
)


def exported(output: str) -> dict[str, str]:
    """What a shell has after pasting ``output``'s export lines (run by a real ``sh``)."""
    pasted = "\n".join(line for line in output.splitlines() if line.startswith(("export ", "#")))
    script = pasted + "\n" + " ".join(f'printf "%s\\n" "${name}";' for name in EXPORTED_NAMES)
    result = subprocess.run(
        ["sh", "-c", script], capture_output=True, text=True, check=True, timeout=10
    )
    return dict(zip(EXPORTED_NAMES, result.stdout.splitlines(), strict=True))
