"""A token names its workspace, so its look-up reads one workspace (one shard on Citus)."""

from __future__ import annotations

import uuid

import pytest

from formation.auth import token_digest, token_text, token_workspace
from messages_app.models import ApiToken
from messages_app.services import token_create
from tests import factories


def test_a_new_token_names_its_workspace_and_hides_its_secret(db):
    workspace = factories.make_workspace()
    token, raw = token_create(workspace_id=workspace.id, kind="service")
    assert raw.startswith(f"fmn_service_{workspace.id.hex}.")
    assert token_workspace(raw) == workspace.id
    assert token.digest == token_digest(raw)
    assert workspace.id.hex not in token.prefix  # the prefix recognises the secret, not the room


@pytest.mark.parametrize(
    "raw",
    [
        "fmn_service_" + "x" * 43,  # the earlier form: no workspace
        "fmn_agent_not-hex-at-all-not-hex-at-all-xx.secret",
        f"fmn_run_{'g' * 32}.secret",
        "",
        ".",
        f"{uuid.uuid4().hex}",
    ],
)
def test_a_token_of_another_form_names_no_workspace(raw):
    assert token_workspace(raw) is None


def test_a_token_of_the_earlier_form_still_authenticates(db):
    """Issued before tokens named their workspace: found by its digest alone."""
    workspace = factories.make_workspace()
    raw = "fmn_service_" + "e" * 43
    ApiToken.objects.create(
        workspace=workspace, kind="service", digest=token_digest(raw), prefix="fmn_service_eeeeee"
    )
    response = factories.bearer_client(raw).get("/api/v1/accounts")
    assert response.status_code == 200, response.content


def test_a_secret_presented_under_another_workspace_is_refused(db):
    """The workspace in the token only narrows the look-up: a valid secret under another
    workspace's id is an unknown token."""
    workspace, other = factories.make_workspace(), factories.make_workspace()
    _, raw = token_create(workspace_id=workspace.id, kind="service")
    secret = raw.partition(".")[2]
    forged = token_text("service", other.id, secret)
    assert factories.bearer_client(forged).get("/api/v1/accounts").status_code == 401
    assert factories.bearer_client(raw).get("/api/v1/accounts").status_code == 200
