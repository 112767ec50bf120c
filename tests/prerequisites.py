"""What ``make test`` and ``make test-citus`` need from the machine, checked before anything runs.

A newcomer who missed the README's list of packages should learn it in a second, not from
failures at the end of a seven-minute run. So both targets start with this check: it names
every missing prerequisite once, what needs it, and the one ``apt-get install`` line that brings
them all, then stops the target (exit 1). ``.ci/run`` asks for the missing packages only
(``--packages``) and installs them before calling the targets.

    python3 -m tests.prerequisites test|citus [--packages]

It uses the standard library only and runs from the project folder, before the virtualenv
exists. Programs are looked up on ``PATH``, as a shell would, and the tests that start them
(``tests/browser/``, ``tests/redis_server.py``) run the ones found here.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from formation import embedded_postgres

PROJECT_DIR = Path(__file__).resolve().parent.parent
CHROMIUM = "chromium"
CHROMEDRIVER = "chromedriver"
REDIS_SERVER = "redis-server"
# What .ci/build-citus builds (its VERSION) and the extension version that installs.
CITUS_VERSION = "13.2.2"
CITUS_EXTENSION_VERSION = "13.2-1"
CITUS_BUILD_PACKAGES = (
    "postgresql-server-dev-15",
    "libcurl4-openssl-dev",
    "liblz4-dev",
    "libzstd-dev",
    "libkrb5-dev",
    "make",
    "gcc",
)


@dataclass(frozen=True)
class Prerequisite:
    """One missing thing: what it is, what needs it, and the Debian package that brings it
    (None when no package does: then ``hint`` says what to do)."""

    name: str
    needed_by: str
    package: str | None
    hint: str = ""


def program(name: str) -> str | None:
    """The program ``name`` as a shell would run it, or None."""
    return shutil.which(name)


def _postgres_missing() -> list[Prerequisite]:
    if os.environ.get("DATABASE_URL"):
        return []
    try:
        embedded_postgres.find_bindir()
    except embedded_postgres.EmbeddedPostgresError:
        return [
            Prerequisite(
                "PostgreSQL's server programs (initdb, pg_ctl)",
                "the embedded cluster every test runs on",
                "postgresql",
            )
        ]
    return []


def _venv_missing() -> list[Prerequisite]:
    """Debian's Python makes no virtualenv without ``python3-venv`` (only checked while
    ``make install`` has not yet made one)."""
    if (PROJECT_DIR / ".venv" / "bin" / ".installed").exists():
        return []
    try:
        import ensurepip  # noqa: F401
    except ImportError:
        return [Prerequisite("Python's venv module", "make install", "python3-venv")]
    return []


def missing_for_tests() -> list[Prerequisite]:
    """What ``make test`` needs and this machine lacks."""
    programs = [
        (CHROMIUM, "the admin's browser test (tests/browser/)", "chromium"),
        (CHROMEDRIVER, "the admin's browser test, which drives Chromium", "chromium-driver"),
        (REDIS_SERVER, "the shared rate-limit tests, which start a private one", "redis-server"),
    ]
    missing = [*_venv_missing(), *_postgres_missing()]
    missing += [
        Prerequisite(name, needed_by, package)
        for name, needed_by, package in programs
        if program(name) is None
    ]
    return missing


def _pg_config() -> str | None:
    """The pg_config .ci/build-citus builds against: PG_CONFIG, PATH's, else the newest
    Debian one."""
    if explicit := os.environ.get("PG_CONFIG"):
        return explicit
    if found := program("pg_config"):
        return found
    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_config"))
    return str(candidates[-1]) if candidates else None


def citus_installed(pg_config: str | None) -> bool:
    """Citus ``CITUS_VERSION`` is installed into ``pg_config``'s PostgreSQL (build-citus's
    test: the library and the control file's default version)."""
    if pg_config is None:
        return False

    def folder(option: str) -> Path:
        answer = subprocess.run([pg_config, option], capture_output=True, text=True, check=False)
        return Path(answer.stdout.strip())

    try:
        control = folder("--sharedir") / "extension" / "citus.control"
        library = folder("--pkglibdir") / "citus.so"
        text = control.read_text() if control.is_file() and library.is_file() else ""
    except OSError:
        return False
    return re.search(rf"^default_version = '{CITUS_EXTENSION_VERSION}'$", text, re.M) is not None


def debian_package_installed(package: str) -> bool:
    return (
        subprocess.run(["dpkg", "-s", package], capture_output=True, check=False).returncode == 0
        if program("dpkg")
        else False
    )


def missing_for_citus(
    *,
    installed: Callable[[str | None], bool] = citus_installed,
    has_package: Callable[[str], bool] = debian_package_installed,
) -> list[Prerequisite]:
    """What ``make test-citus`` needs and this machine lacks: the embedded cluster's
    PostgreSQL, and unless Citus is installed already, what .ci/build-citus builds it from."""
    missing = [*_venv_missing(), *_postgres_missing()]
    if installed(_pg_config()):
        return missing
    missing += [
        Prerequisite(package, f"building Citus {CITUS_VERSION} (.ci/build-citus)", package)
        for package in CITUS_BUILD_PACKAGES
        if not has_package(package)
    ]
    source = Path(os.environ.get("CITUS_SOURCE", PROJECT_DIR.parent / "shared" / "citus"))
    tarball = source / f"citus-{CITUS_VERSION}.tar.gz"
    if not tarball.is_file():
        missing.append(
            Prerequisite(
                f"the Citus source, {tarball}",
                "building Citus (.ci/build-citus)",
                None,
                "set CITUS_SOURCE to the folder holding it, or install Citus "
                f"{CITUS_VERSION.rsplit('.', 1)[0]} from its packages instead (docs/citus.md)",
            )
        )
    return missing


def install_line(missing: Sequence[Prerequisite]) -> str | None:
    """The one command that installs every missing package, or None if no package helps."""
    packages = sorted({item.package for item in missing if item.package})
    if not packages:
        return None
    sudo = "" if os.geteuid() == 0 else "sudo "
    return f"{sudo}apt-get install -y {' '.join(packages)}"


def message(target: str, missing: Sequence[Prerequisite]) -> str:
    """The one message a target stops with: every missing thing once, then how to get them."""
    lines = [f"make {target} needs what this machine lacks:"]
    lines += [f"  - {item.name}: for {item.needed_by}" for item in missing]
    if line := install_line(missing):
        lines += ["Install the packages (Debian/Ubuntu) with:", f"  {line}"]
    lines += [f"For {item.name}: {item.hint}." for item in missing if item.hint]
    return "\n".join(lines)


CHECKS = {"test": missing_for_tests, "citus": missing_for_citus}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Check what make test or test-citus needs.")
    parser.add_argument("target", choices=CHECKS, help="test (make test) or citus (test-citus)")
    parser.add_argument(
        "--packages",
        action="store_true",
        help="print only the missing Debian packages, space-separated, and exit 0",
    )
    options = parser.parse_args(argv)
    missing = CHECKS[options.target]()
    if options.packages:
        print(" ".join(sorted({item.package for item in missing if item.package})))
        return 0
    if missing:
        target = "test" if options.target == "test" else "test-citus"
        print(message(target, missing), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
