"""A small synthetic demo workspace for the quick start (no real people or text)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from messages_app import services
from messages_app.models import Account, Agent, ApiToken, Conversation, Run, TokenKind, Workspace
from search_app.runs.services import run_create

DEMO_SLUG = "demo"

AGENT = "agent"  # a line the demo agent wrote, in the rooms it replies in

# (kind, title, members, lines as (speaker, text)). Each room has its own talk, so the first
# searches find distinct messages: "migration" matches in every room (the archive's is withheld
# from the demo run), and one message in the private room holds both words of "migration
# decision". All of it is invented.
ROOMS = [
    (
        "public",
        "general",
        ["Ada Sample", "Grace Sample", "Linus Sample"],
        [
            ("Linus Sample", "Morning all: the nightly build is green again"),
            ("Grace Sample", "The billing alert fired twice overnight, I am looking into it"),
            ("Ada Sample", "The staging database migration finished in 14 minutes"),
            ("Linus Sample", "Café order for the offsite is confirmed for Thursday"),
            ("Grace Sample", "Billing alert traced to a retry loop, fix is in review"),
            ("Ada Sample", "Retro notes are in the usual folder"),
            ("Linus Sample", "Reminder: the office is closed on Monday"),
            ("Grace Sample", "Production maintenance window is Tuesday 06:00 to 07:00 UTC"),
        ],
    ),
    (
        "private",
        "migration-planning",
        ["Ada Sample", "Grace Sample"],
        [
            ("Ada Sample", "Can we move the migration to next Tuesday?"),
            ("Grace Sample", "Tuesday works if the rollback script is tested by Friday"),
            ("Grace Sample", "Rollback tested on staging: three minutes end to end"),
            (
                "Ada Sample",
                "Decision: the migration runs Tuesday and the old endpoint stays until the "
                "end of the month",
            ),
            ("Grace Sample", "I will tell support about the short read-only window"),
            ("Ada Sample", "Half of the customer import is done, the rest runs tonight"),
        ],
    ),
    (
        "direct",
        "ada-and-agent",
        ["Ada Sample"],
        [
            ("Ada Sample", "Please keep an eye on the migration channel for me this week"),
            (AGENT, "Will do. I will summarise anything that changes the plan."),
            ("Ada Sample", "Also draft a short note for support about Tuesday"),
            (AGENT, "Draft ready: a read-only window of about an hour on Tuesday morning."),
            ("Ada Sample", "Thanks, send it after the retro"),
        ],
    ),
    (
        "unknown",
        "imported-archive",
        [],
        [
            ("Linus Sample", "Imported from the old tracker: ticket 88 closed as fixed"),
            ("Linus Sample", "Archive: the 2019 migration used a freeze weekend"),
            ("Linus Sample", "Archive: vendor contract renewal moved to the spring"),
        ],
    ),
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
    for room_index, (kind, title, members, lines) in enumerate(ROOMS):
        conversation = services.conversation_create(
            workspace_id=workspace.id, kind=kind, title=title
        )
        services.membership_join(conversation=conversation, agent_id=agent.id, joined_at=start)
        for name in members:
            services.membership_join(
                conversation=conversation, account_id=people[name].id, joined_at=start
            )
        drafts = [
            services.MessageDraft(
                content=text,
                sender_agent_id=agent.id if speaker == AGENT else None,
                sender_account_id=None if speaker == AGENT else people[speaker].id,
                created_at=start + timedelta(days=index * 3 + room_index, minutes=index),
            )
            for index, (speaker, text) in enumerate(lines)
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
