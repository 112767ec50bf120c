"""The private development/test cluster (formation/embedded_postgres.py).

These tests use the cluster the test session already runs on; none of them stops it.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from formation import embedded_postgres
from tests.helpers import project_python

PROJECT_DIR = Path(__file__).resolve().parent.parent


def test_find_bindir_returns_a_folder_with_initdb_and_pg_ctl(monkeypatch):
    monkeypatch.delenv("FORMATION_PG_BINDIR", raising=False)
    bindir = embedded_postgres.find_bindir()
    assert (bindir / "initdb").is_file()
    assert (bindir / "pg_ctl").is_file()


def test_find_bindir_prefers_formation_pg_bindir(monkeypatch, tmp_path):
    for program in ("initdb", "pg_ctl"):
        (tmp_path / program).write_text("#!/bin/sh\n")
    monkeypatch.setenv("FORMATION_PG_BINDIR", str(tmp_path))
    assert embedded_postgres.find_bindir() == tmp_path


def test_find_bindir_skips_a_formation_pg_bindir_without_the_programs(monkeypatch, tmp_path):
    (tmp_path / "initdb").write_text("#!/bin/sh\n")  # pg_ctl missing
    monkeypatch.setenv("FORMATION_PG_BINDIR", str(tmp_path))
    bindir = embedded_postgres.find_bindir()
    assert bindir != tmp_path
    assert (bindir / "pg_ctl").is_file()


def test_install_hint_is_one_sentence_naming_the_package():
    hint = embedded_postgres.INSTALL_HINT
    assert "\n" not in hint
    assert hint.endswith(".")
    # One sentence: the only sentence-ending stop is the last character.
    assert len(re.findall(r"[.!?](?:\s|$)", hint)) == 1
    assert "apt-get install postgresql" in hint
    assert "DATABASE_URL" in hint


def test_ensure_running_is_idempotent_and_fast_when_running():
    first = embedded_postgres.ensure_running()
    started = time.monotonic()
    second = embedded_postgres.ensure_running()
    elapsed = time.monotonic() - started
    assert second == first
    assert embedded_postgres.is_running(second)
    # Already running: no initdb, no pg_ctl start, just a status probe.
    assert elapsed < 5


def test_main_status_reports_the_running_cluster(capsys):
    assert embedded_postgres.main(["embedded_postgres", "status"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("running: ")
    assert out.strip().endswith(str(embedded_postgres.locate().base_dir))


def test_main_url_prints_a_socket_url(capsys):
    assert embedded_postgres.main(["embedded_postgres", "url"]) == 0
    url = capsys.readouterr().out.strip()
    assert url.startswith("postgresql://postgres@/formation?host=")
    assert f"port={embedded_postgres.PORT}" in url


def test_main_rejects_an_unknown_command(capsys):
    assert embedded_postgres.main(["embedded_postgres", "restart-everything"]) == 2
    assert "usage:" in capsys.readouterr().out


def test_locate_falls_back_to_temp_when_the_server_user_cannot_reach_the_project(monkeypatch):
    monkeypatch.setattr(embedded_postgres, "_server_user_can_reach", lambda path: False)
    bindir = Path("/nonexistent/bin")
    cluster = embedded_postgres.locate(bindir)
    digest = hashlib.sha256(str(embedded_postgres.PROJECT_DIR).encode()).hexdigest()[:12]
    assert cluster.moved_to_temp
    assert cluster.base_dir == Path(tempfile.gettempdir()) / f"formation-pg-{digest}"
    assert cluster.bindir == bindir
    # Stable: every process of this project finds the same fallback folder.
    assert embedded_postgres.locate(bindir) == cluster


def test_locate_prefers_the_project_folder_when_reachable(monkeypatch):
    monkeypatch.setattr(embedded_postgres, "_server_user_can_reach", lambda path: True)
    cluster = embedded_postgres.locate(Path("/nonexistent/bin"))
    assert not cluster.moved_to_temp
    assert cluster.base_dir == embedded_postgres.PROJECT_DIR / ".pg"


def test_locate_falls_back_to_temp_when_the_socket_path_is_too_long(monkeypatch):
    monkeypatch.setattr(embedded_postgres, "_server_user_can_reach", lambda path: True)
    monkeypatch.setattr(embedded_postgres, "PROJECT_DIR", Path("/srv/" + "deep/" * 30 + "proj"))
    cluster = embedded_postgres.locate(Path("/nonexistent/bin"))
    assert cluster.moved_to_temp
    assert len(str(cluster.socket_dir / f".s.PGSQL.{embedded_postgres.PORT}")) <= 107


def test_main_prints_the_install_hint_without_a_traceback(monkeypatch, capsys):
    def no_postgres() -> Path:
        raise embedded_postgres.EmbeddedPostgresError(embedded_postgres.INSTALL_HINT)

    monkeypatch.setattr(embedded_postgres, "find_bindir", no_postgres)
    assert embedded_postgres.main(["embedded_postgres", "start"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == embedded_postgres.INSTALL_HINT + "\n"


# With no PostgreSQL installed, find_bindir() fails; the settings must turn that into the one
# sentence and exit, with no traceback. find_bindir() always also searches fixed system folders
# (/usr/lib/postgresql/*/bin, /usr/bin, ...), so the child process replaces it with the failure
# it would raise; everything from settings to manage.py runs for real.
NO_POSTGRES_CHILD = """
import sys
import formation.embedded_postgres as e

def no_postgres():
    raise e.EmbeddedPostgresError(e.INSTALL_HINT)

e.find_bindir = no_postgres
sys.argv = ["manage.py", "check"]
import manage
manage.main()
"""


def test_manage_py_without_postgres_prints_one_sentence_and_no_traceback():
    result = project_python(
        ["-c", NO_POSTGRES_CHILD],
        without={"DATABASE_URL", "DJANGO_SETTINGS_MODULE", "FORMATION_PG_BINDIR"},
        SECRET_KEY="test-only-secret-key-for-a-subprocess",
    )
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert result.stderr.strip() == embedded_postgres.INSTALL_HINT
    assert result.stdout == ""


@pytest.mark.parametrize("command", ["status", "url"])
def test_module_runs_as_a_script(command):
    result = subprocess.run(
        [sys.executable, "-m", "formation.embedded_postgres", command],
        cwd=PROJECT_DIR,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr


def test_private_dir_refuses_a_planted_symlink(tmp_path):
    """The temp fallback has a predictable name: a symlink planted there must not be followed."""
    victim = tmp_path / "victim"
    victim.mkdir(mode=0o755)
    planted = tmp_path / "planted"
    planted.symlink_to(victim)
    with pytest.raises(embedded_postgres.EmbeddedPostgresError):
        embedded_postgres._private_dir(planted, mode=0o700, owner_uid=os.geteuid())
    assert (victim.stat().st_mode & 0o777) == 0o755


def test_private_dir_creates_owner_only_folder(tmp_path):
    target = tmp_path / "fresh"
    embedded_postgres._private_dir(target, mode=0o700, owner_uid=os.geteuid())
    assert (target.stat().st_mode & 0o777) == 0o700


def test_running_socket_is_owner_only_and_failing_statements_are_not_logged():
    """Trust auth is only safe because nobody but the owner (and root) reaches the socket."""
    cluster = embedded_postgres.ensure_running()
    socket_file = cluster.socket_dir / f".s.PGSQL.{embedded_postgres.PORT}"
    assert (socket_file.stat().st_mode & 0o777) == 0o700
    assert (cluster.socket_dir.stat().st_mode & 0o777) == 0o700
    import psycopg

    with psycopg.connect(
        host=str(cluster.socket_dir),
        port=embedded_postgres.PORT,
        user=embedded_postgres.SUPERUSER,
        dbname="postgres",
    ) as connection:
        shown = connection.execute("SHOW log_min_error_statement").fetchone()[0]
    assert shown == "panic"


# --- `run -- COMMAND`: what make test uses ------------------------------------------------------

# The module's main() for a project in another folder, so the cluster it starts and stops is a
# throwaway one, never the cluster this test session runs on.
OTHER_PROJECT_CHILD = """
import sys
from pathlib import Path
from formation import embedded_postgres as e
e.PROJECT_DIR = Path(sys.argv[1])
sys.exit(e.main(["embedded_postgres", *sys.argv[2:]]))
"""


def other_project(folder: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return project_python(
        ["-c", OTHER_PROJECT_CHILD, str(folder), *args],
        without={"DATABASE_URL"},
        timeout=180,
        **env,
    )


def status_of(folder: Path) -> tuple[str, Path]:
    state, _, base_dir = other_project(folder, "status").stdout.strip().partition(": ")
    return state, Path(base_dir)


@pytest.fixture
def throwaway_project(tmp_path):
    folder = tmp_path / "project"
    folder.mkdir()
    yield folder
    other_project(folder, "stop")
    shutil.rmtree(status_of(folder)[1], ignore_errors=True)


def test_run_stops_a_cluster_it_started_and_passes_the_exit_code_on(throwaway_project):
    probe = [sys.executable, "-c", OTHER_PROJECT_CHILD, str(throwaway_project), "status"]
    assert status_of(throwaway_project)[0] == "stopped"
    result = other_project(throwaway_project, "run", "--", *probe)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("running: ")
    assert status_of(throwaway_project)[0] == "stopped"

    failing = [sys.executable, "-c", "raise SystemExit(3)"]
    assert other_project(throwaway_project, "run", "--", *failing).returncode == 3
    assert status_of(throwaway_project)[0] == "stopped"


def test_run_leaves_a_cluster_that_was_already_running(throwaway_project):
    assert other_project(throwaway_project, "start").returncode == 0
    result = other_project(throwaway_project, "run", "--", sys.executable, "-c", "pass")
    assert result.returncode == 0, result.stderr
    assert status_of(throwaway_project)[0] == "running"


def test_run_with_database_url_set_starts_no_cluster(throwaway_project):
    result = other_project(
        throwaway_project, "run", "--", "true", DATABASE_URL="postgresql://nobody@localhost:1/x"
    )
    assert result.returncode == 0, result.stderr
    assert not status_of(throwaway_project)[1].exists()


def test_run_needs_a_command(capsys):
    assert embedded_postgres.main(["embedded_postgres", "run", "--"]) == 2
    assert "usage:" in capsys.readouterr().out


def test_server_options_preload_pg_stat_statements_with_utility_statements(tmp_path):
    """bench/benchmark.py counts a request's round trips, BEGIN and COMMIT included, there."""
    options = embedded_postgres.server_options(tmp_path, 55432).split()
    assert "shared_preload_libraries=pg_stat_statements" in options
    assert "pg_stat_statements.track_utility=on" in options
