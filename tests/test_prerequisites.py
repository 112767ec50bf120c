"""``make test`` and ``make test-citus`` stop at once, with one message, on a machine that
lacks what they need (tests/prerequisites.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests import prerequisites

PROJECT_DIR = Path(__file__).resolve().parent.parent


def test_every_missing_program_is_named_once_with_one_install_line(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    missing = prerequisites.missing_for_tests()
    packages = {item.package for item in missing}
    assert {"chromium", "chromium-driver", "redis-server"} <= packages

    text = prerequisites.message("test", missing)
    assert text.startswith("make test needs what this machine lacks:")
    for name in ("chromium", "chromedriver", "redis-server"):
        assert sum(line.startswith(f"  - {name}:") for line in text.splitlines()) == 1
    (line,) = [line for line in text.splitlines() if "apt-get install" in line]
    assert line.split("apt-get install -y ")[1].split() == sorted(packages)


def test_the_check_exits_at_once_naming_what_is_missing(tmp_path):
    """Run as make runs it (system Python, no virtualenv on the path), with nothing on PATH."""
    answer = subprocess.run(
        [sys.executable, "-m", "tests.prerequisites", "test"],
        cwd=PROJECT_DIR,
        env={"PATH": str(tmp_path), "DATABASE_URL": "postgres://unused/unused"},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert answer.returncode == 1
    assert "redis-server" in answer.stderr
    assert "apt-get install -y chromium chromium-driver redis-server" in answer.stderr
    packages = subprocess.run(
        [sys.executable, "-m", "tests.prerequisites", "test", "--packages"],
        cwd=PROJECT_DIR,
        env={"PATH": str(tmp_path), "DATABASE_URL": "postgres://unused/unused"},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert packages.returncode == 0
    assert packages.stdout.split() == ["chromium", "chromium-driver", "redis-server"]


def test_a_machine_with_everything_passes_the_check():
    assert prerequisites.missing_for_tests() == []


def test_citus_needs_its_build_packages_only_until_it_is_installed():
    assert (
        prerequisites.missing_for_citus(installed=lambda _: True, has_package=lambda _: False) == []
    )
    missing = prerequisites.missing_for_citus(
        installed=lambda _: False, has_package=lambda package: package != "liblz4-dev"
    )
    assert [item.package for item in missing if item.package] == ["liblz4-dev"]
