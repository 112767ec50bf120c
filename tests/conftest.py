"""Shared fixtures: a workspace with an agent, two people and rooms of every kind."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from rest_framework.test import APIClient

from messages_app.models import Account, Agent, Conversation, Workspace
from tests import factories


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
