"""A small synthetic demo workspace for the quick start (no real people or text)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from messages_app import services
from messages_app.models import Account, Agent, ApiToken, Conversation, Run, TokenKind, Workspace
from search_app.runs import run_create

DEMO_SLUG = "demo"

ROOMS = [
    ("public", "general", ["Ada Sample", "Grace Sample", "Linus Sample"]),
    ("private", "migration-planning", ["Ada Sample", "Grace Sample"]),
    ("direct", "ada-and-agent", ["Ada Sample"]),
    ("unknown", "imported-archive", []),
]

LINES = [
    "sample status: the nightly build is green again",
    "Can we move the migration to next Tuesday?",
    "The staging database migration finished in 14 minutes",
    "Reminder: retro notes are in the usual folder",
    "50% of the import is done, the rest runs tonight",
    "Decision: we keep the old endpoint until the end of the month",
    "Café order for the offsite is confirmed",
    "Who owns the follow-up on the billing alert?",
]


@dataclass(frozen=True)
class DemoWorkspace:
    workspace: Workspace
    agent: Agent
    created: bool


@transaction.atomic
def demo_workspace_load() -> DemoWorkspace:
    """Create the demo workspace once; later calls return the existing one unchanged."""
    existing = Workspace.objects.filter(slug=DEMO_SLUG).first()
    if existing is not None:
        agent = Agent.objects.filter(workspace=existing).order_by("created_at").first()
        return DemoWorkspace(workspace=existing, agent=agent, created=False)

    workspace = services.workspace_create(slug=DEMO_SLUG, name="Demo workspace")
    agent = services.agent_create(workspace_id=workspace.id, name="Demo agent")
    start = timezone.now() - timedelta(days=30)
    people = {
        name: services.account_create(
            workspace_id=workspace.id, display_name=name, external_id=name.split()[0].lower()
        )
        for name in ("Ada Sample", "Grace Sample", "Linus Sample")
    }
    for room_index, (kind, title, members) in enumerate(ROOMS):
        conversation = services.conversation_create(
            workspace_id=workspace.id, kind=kind, title=title
        )
        services.membership_join(conversation=conversation, agent_id=agent.id, joined_at=start)
        for name in members:
            services.membership_join(
                conversation=conversation, account_id=people[name].id, joined_at=start
            )
        speakers = [people[name] for name in members] or list(people.values())[:1]
        drafts = [
            services.MessageDraft(
                content=line,
                sender_account_id=speakers[index % len(speakers)].id,
                created_at=start + timedelta(days=index * 3 + room_index, minutes=index),
            )
            for index, line in enumerate(LINES)
        ]
        services.messages_create(conversation=conversation, drafts=drafts)
    link = services.identity_link_create(
        workspace_id=workspace.id,
        account_id=people["Ada Sample"].id,
        linked_account_id=people["Linus Sample"].id,
    )
    services.identity_link_verify(link=link)
    return DemoWorkspace(workspace=workspace, agent=agent, created=True)


@dataclass(frozen=True)
class DemoTokens:
    """The plain-text demo tokens (their only copy) and the run the run token belongs to."""

    service: str
    agent: str
    run: Run
    run_token: str
    revoked: int


@transaction.atomic
def demo_tokens_issue(demo: DemoWorkspace) -> DemoTokens:
    """Revoke every earlier token of the demo workspace, then make a service token, an agent
    token and a run with its token.

    Tokens are stored hashed, so each ``load_demo`` must print new ones; revoking the old ones
    keeps repeated ``make run``s from piling up working tokens nobody can see any more.
    """
    revoked = ApiToken.objects.filter(workspace=demo.workspace, revoked_at__isnull=True).update(
        revoked_at=timezone.now()
    )
    _, service = services.token_create(workspace_id=demo.workspace.id, kind=TokenKind.SERVICE)
    _, agent = services.token_create(
        workspace_id=demo.workspace.id, kind=TokenKind.AGENT, agent=demo.agent
    )
    run, run_token = demo_run_create(demo)
    return DemoTokens(service=service, agent=agent, run=run, run_token=run_token, revoked=revoked)


def demo_run_create(demo: DemoWorkspace) -> tuple[Run, str]:
    """A fresh run in Ada's direct conversation with the agent, and its run token.

    From there search_history may use the public room, Ada's direct room and the private room
    Ada reads, but never the imported archive (unknown audience).
    """
    ada = Account.objects.get(workspace=demo.workspace, external_id="ada")
    direct = Conversation.objects.get(workspace=demo.workspace, title="ada-and-agent")
    return run_create(
        workspace_id=demo.workspace.id,
        agent_id=demo.agent.id,
        conversation_id=direct.id,
        requester_id=ada.id,
    )
