"""Shared fixtures: a workspace with an agent, two people and rooms of every kind."""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass

import pytest
from rest_framework.test import APIClient

from messages_app.models import Account, Agent, Conversation, Message, Workspace
from tests import factories
from tests.factories import at

# tests/citus needs a Citus cluster: only the Citus suite collects it.
collect_ignore = [] if os.environ.get("FORMATION_TEST_DATABASE_PREPARED") else ["citus"]

if os.environ.get("FORMATION_TEST_DATABASE_PREPARED"):
    # The Citus suite (make test-citus): the test database was made on every node, with the
    # extension and the workers, by formation/citus_cluster.py; it is migrated (which
    # distributes its tables) and used as it is, never created or dropped by the test run.

    @pytest.fixture(scope="session")
    def django_db_setup(django_db_blocker):
        from django.core.management import call_command

        with django_db_blocker.unblock():
            call_command("migrate", verbosity=0)


# The LoCoMo recall floor reads data that is never in the repository (CC BY-NC 4.0): it runs
# only when asked (make test-locomo, which .ci/run runs), and a run that leaves it out says so
# in its summary rather than passing or skipping it in silence.
LOCOMO = "--locomo"
_LEFT_OUT = pytest.StashKey[list[str]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        LOCOMO,
        action="store_true",
        help="also run the tests marked locomo (they fail when ../shared/locomo is missing)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "locomo: reads the LoCoMo data beside the checkout (make test-locomo)"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption(LOCOMO):
        return
    left_out = [item for item in items if item.get_closest_marker("locomo")]
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = [item for item in items if not item.get_closest_marker("locomo")]
    config.stash[_LEFT_OUT] = [item.nodeid for item in left_out]


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    left_out = config.stash.get(_LEFT_OUT, [])
    if not left_out:
        return
    terminalreporter.write_sep("=", "not run here")
    for nodeid in left_out:
        terminalreporter.write_line(
            f"{nodeid}: the LoCoMo recall floor, which needs ../shared/locomo beside the "
            "checkout; make test-locomo runs it (.ci/run does)"
        )


@dataclass
class World:
    workspace: Workspace
    agent: Agent
    alice: Account
    bob: Account
    public: Conversation
    private: Conversation
    direct: Conversation
    service: APIClient
    agent_api: APIClient


@pytest.fixture
def world(db) -> World:
    """One workspace: the agent, Alice and Bob are members of a public and a private room; the
    agent and Alice share a direct conversation."""
    workspace = factories.make_workspace("acme")
    agent = factories.make_agent(workspace)
    alice = factories.make_account(workspace, "Alice Example")
    bob = factories.make_account(workspace, "Bob Example")
    public = factories.make_conversation(workspace, "public", "general")
    private = factories.make_conversation(workspace, "private", "planning")
    direct = factories.make_conversation(workspace, "direct", "alice-dm")
    for room in (public, private):
        for member in (agent, alice, bob):
            factories.join(room, member)
    factories.join(direct, agent)
    factories.join(direct, alice)
    return World(
        workspace=workspace,
        agent=agent,
        alice=alice,
        bob=bob,
        public=public,
        private=private,
        direct=direct,
        service=factories.service_client(workspace),
        agent_api=factories.agent_client(agent),
    )


@pytest.fixture
def descending_ids(monkeypatch):
    """New messages get ever *smaller* ids, so an id tie-break runs against seq order."""
    counter = iter(range(10**6))
    field = Message._meta.get_field("id")
    monkeypatch.setattr(field, "_get_default", lambda: uuid.UUID(int=10**30 - next(counter)))


@pytest.fixture
def timeline(world) -> list[Message]:
    """Six messages in the private room, one minute apart, oldest first (m0 … m5)."""
    senders = [world.alice, world.agent, world.bob]
    return [
        factories.post(world.private, senders[i % 3], f"sample status {i}", created_at=at(i))
        for i in range(6)
    ]
