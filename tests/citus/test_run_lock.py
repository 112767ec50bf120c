"""On Citus a run is locked on the coordinator as well as on its shard (issue 17; docs/citus.md,
"A run's lock across a shard move"): a row lock stays on the placement it was taken on, so
only the coordinator's lock serializes two calls of one run across a move's switch-over.

Runs only in the Citus suite (``make test-citus``)."""

from __future__ import annotations

import pytest
from django.db import connection, transaction

from search_app.runs.services import run_lock
from tests import factories


def _run_locks(run_id) -> list[tuple[str, bool]]:
    """This backend's advisory locks on the coordinator keyed by the run: (mode, granted).
    A bigint key shows as its high and low 32 bits, ``objsubid`` 1 (Citus takes advisory locks
    of its own, with other keys)."""
    key = int.from_bytes(run_id.bytes[:8], "big", signed=True) & 0xFFFFFFFFFFFFFFFF
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT mode, granted FROM pg_locks WHERE locktype = 'advisory' "
            "AND pid = pg_backend_pid() AND objsubid = 1 "
            "AND classid::bigint = %s AND objid::bigint = %s ORDER BY mode",
            [key >> 32, key & 0xFFFFFFFF],
        )
        return cursor.fetchall()


@pytest.mark.parametrize(("exclusive", "mode"), [(True, "ExclusiveLock"), (False, "ShareLock")])
def test_a_run_is_locked_on_the_coordinator_for_the_transaction(db, exclusive, mode):
    workspace, agent, alice, public = factories.observed_public_room()
    run, _ = factories.make_run(agent, public, alice)
    with transaction.atomic():
        assert _run_locks(run.id) == []
        run_lock(workspace_id=workspace.id, run_id=run.id, exclusive=exclusive)
        assert _run_locks(run.id) == [(mode, True)]
