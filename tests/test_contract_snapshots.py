"""The wire contract as committed text: the OpenAPI document and ``export_tools``' output.

Clients rely on every path, field name, status and error code (SPEC §5 and §8), so a change to
any of them must be seen in review: this fails until ``tests/contract_snapshots/`` is written
again, which shows the change as a diff. A restructuring that should change nothing (issue 26)
proves it here, byte for byte.

    FORMATION_UPDATE_CONTRACT_SNAPSHOTS=1 .venv/bin/pytest tests/test_contract_snapshots.py
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest
from django.core.management import call_command

from formation.tools import STYLES

SNAPSHOTS = Path(__file__).parent / "contract_snapshots"
UPDATE = os.environ.get("FORMATION_UPDATE_CONTRACT_SNAPSHOTS") == "1"


def matches_snapshot(name: str, text: str) -> None:
    path = SNAPSHOTS / name
    if UPDATE:
        SNAPSHOTS.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"no snapshot {name}: write it with FORMATION_UPDATE_CONTRACT_SNAPSHOTS=1"
    assert text == path.read_text(), f"{name} changed; review the diff and write it again"


def test_the_openapi_document_is_the_committed_one(tmp_path):
    target = tmp_path / "openapi.json"
    call_command("spectacular", "--format", "openapi-json", "--file", str(target))
    matches_snapshot("openapi.json", target.read_text())


@pytest.mark.parametrize("style", STYLES)
def test_the_tool_definitions_are_the_committed_ones(style):
    out = io.StringIO()
    call_command("export_tools", "--format", style, stdout=out)
    matches_snapshot(f"tools-{style}.json", out.getvalue())
