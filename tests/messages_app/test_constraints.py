"""PostgreSQL itself enforces the invariants (SPEC §2, STYLE "Models").

Every test here bypasses the services on purpose: rows are written with ``Model.objects.create``
or raw SQL, so a failure means the database constraint is missing, not a Python check. Each
violation runs in its own ``transaction.atomic()`` (a savepoint) so the test can go on after it.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta

import pytest
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from messages_app.models import (
    Account,
    Agent,
    ApiToken,
    Conversation,
    IdentityLink,
    Membership,
    Message,
    MessageLineage,
    Run,
    Workspace,
)
from tests import factories


@dataclass
class Scope:
    workspace: Workspace
    other_workspace: Workspace
    alice: Account
    bob: Account
    agent: Agent
    room: Conversation
    other_room: Conversation
    foreign_room: Conversation
    foreign_account: Account


@pytest.fixture
def scope(db) -> Scope:
    workspace = factories.make_workspace("cons-a")
    other_workspace = factories.make_workspace("cons-b")
    return Scope(
        workspace=workspace,
        other_workspace=other_workspace,
        alice=factories.make_account(workspace, "Alice Example"),
        bob=factories.make_account(workspace, "Bob Example"),
        agent=factories.make_agent(workspace),
        room=factories.make_conversation(workspace, "private", "room"),
        other_room=factories.make_conversation(workspace, "private", "other room"),
        foreign_room=factories.make_conversation(other_workspace, "private", "foreign room"),
        foreign_account=factories.make_account(other_workspace, "Carol Example"),
    )


@contextlib.contextmanager
def violates(constraint: str) -> Iterator[None]:
    """PostgreSQL refuses the write, naming ``constraint`` (not some other, accidental error)."""
    with pytest.raises(IntegrityError, match=rf"\b{constraint}"), transaction.atomic():
        yield


def raw_message(
    s: Scope, *, seq: int, conversation: Conversation | None = None, **fields
) -> Message:
    """A message written straight to the table, with a valid default sender."""
    conversation = conversation or s.room
    values = {
        "workspace_id": conversation.workspace_id,
        "conversation": conversation,
        "seq": seq,
        "role": "user",
        "content": "sample status",
    }
    if "sender_agent" not in fields and "sender_account" not in fields:
        home = conversation.workspace_id == s.workspace.id
        values["sender_account"] = s.alice if home else s.foreign_account
    values.update(fields)
    return Message.objects.create(**values)


def at(hours: float) -> datetime:
    base = datetime(2024, 3, 1, 9, 0, tzinfo=timezone.get_current_timezone())
    return base + timedelta(hours=hours)


# --- messages ------------------------------------------------------------------------------


def test_seq_is_unique_per_conversation(scope):
    raw_message(scope, seq=1)
    with violates("message_seq_unique"):
        raw_message(scope, seq=1)
    # The same seq in another conversation is fine.
    raw_message(scope, seq=1, conversation=scope.other_room)
    assert Message.objects.filter(seq=1).count() == 2


@pytest.mark.parametrize("seq", [0, -1])
def test_seq_must_be_positive(scope, seq):
    with violates("message_seq_positive"):
        raw_message(scope, seq=seq)


def test_sender_cannot_be_both_account_and_agent(scope):
    with violates("message_exactly_one_sender"):
        raw_message(scope, seq=1, sender_account=scope.alice, sender_agent=scope.agent)


def test_sender_cannot_be_missing(scope):
    with violates("message_exactly_one_sender"):
        raw_message(scope, seq=1, sender_account=None, sender_agent=None)


def test_sender_agent_alone_is_allowed(scope):
    message = raw_message(scope, seq=1, sender_agent=scope.agent, role="assistant")
    assert message.sender_agent_id == scope.agent.id


def test_deleted_message_must_have_empty_content(scope):
    with violates("message_deleted_has_no_body"):
        raw_message(scope, seq=1, deleted_at=timezone.now(), content="still here")
    raw_message(scope, seq=1, deleted_at=timezone.now(), content="")


def test_deleted_message_body_cannot_be_restored_by_sql(scope):
    message = raw_message(scope, seq=1, deleted_at=timezone.now(), content="")
    with violates("message_deleted_has_no_body"), connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {Message._meta.db_table} SET content = %s WHERE id = %s",
            ["restored text", message.id],
        )


def test_message_workspace_must_match_its_conversation(scope):
    # Composite FK (workspace_id, conversation_id) -> conversation (workspace_id, id).
    with violates("message_conversation_same_ws"):
        raw_message(scope, seq=1, workspace_id=scope.other_workspace.id)


def test_message_sender_must_be_in_the_message_workspace(scope):
    with violates("message_sender_account_same_ws"):
        raw_message(scope, seq=1, sender_account=scope.foreign_account)


def test_message_workspace_mismatch_via_raw_sql(scope):
    with violates("message_conversation_same_ws"), connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {Message._meta.db_table} (id, workspace_id, conversation_id, seq, role,"
            " status, sender_account_id, content, created_at)"
            " VALUES (%s, %s, %s, 1, 'user', 'sent', %s, 'x', now())",
            [uuid.uuid4(), scope.other_workspace.id, scope.room.id, scope.alice.id],
        )


@pytest.mark.parametrize("reference", ["reply_to", "thread"])
def test_reply_and_thread_must_stay_in_the_conversation(scope, reference):
    elsewhere = raw_message(scope, seq=1, conversation=scope.other_room)
    with violates(f"message_{reference}_same_conversation"):
        raw_message(scope, seq=1, **{reference: elsewhere})
    # A reference inside the same conversation is fine.
    root = raw_message(scope, seq=2)
    assert raw_message(scope, seq=3, **{reference: root}).pk


# --- memberships ---------------------------------------------------------------------------


def membership(s: Scope, **fields) -> Membership:
    values = {"workspace_id": s.workspace.id, "conversation": s.room, "joined_at": at(0)}
    values.update(fields)
    return Membership.objects.create(**values)


def test_membership_needs_exactly_one_member(scope):
    with violates("membership_exactly_one_member"):
        membership(scope, account=scope.alice, agent=scope.agent)
    with violates("membership_exactly_one_member"):
        membership(scope)


@pytest.mark.parametrize("left_offset", [0, -1])
def test_left_at_must_be_after_joined_at(scope, left_offset):
    with violates("membership_left_after_joined"):
        membership(scope, account=scope.alice, joined_at=at(1), left_at=at(1 + left_offset))


def test_membership_workspace_must_match_conversation(scope):
    with violates("membership_conversation_same_ws"):
        membership(scope, account=scope.alice, workspace_id=scope.other_workspace.id)


@pytest.mark.parametrize("member", ["account", "agent"])
def test_membership_intervals_of_one_member_never_overlap(scope, member):
    who = {"account": scope.alice, "agent": scope.agent}[member]
    membership(scope, **{member: who}, joined_at=at(0), left_at=at(2))  # [t0, t2)
    with violates(f"membership_{member}_no_overlap"):
        membership(scope, **{member: who}, joined_at=at(1), left_at=at(3))
    with violates(f"membership_{member}_no_overlap"):
        membership(scope, **{member: who}, joined_at=at(-1), left_at=None)  # open, covers all
    # Adjacent: [t2, t4) starts exactly where [t0, t2) ended.
    membership(scope, **{member: who}, joined_at=at(2), left_at=at(4))
    membership(scope, **{member: who}, joined_at=at(5), left_at=None)  # current from t5
    with violates(f"membership_{member}_no_overlap"):
        membership(scope, **{member: who}, joined_at=at(6), left_at=None)  # two current ones
    # The same interval for another member, or in another conversation, is fine.
    other = {"account": {"account": scope.bob}, "agent": {"account": scope.alice}}[member]
    membership(scope, **other, joined_at=at(1), left_at=at(3))
    membership(scope, **{member: who}, conversation=scope.other_room, joined_at=at(1))
    assert Membership.objects.filter(**{member: who}, conversation=scope.room).count() == 3


# --- identity links ------------------------------------------------------------------------


def link(s: Scope, account: Account, linked: Account, **fields) -> IdentityLink:
    return IdentityLink.objects.create(
        workspace_id=s.workspace.id, account=account, linked_account=linked, **fields
    )


def test_identity_link_cannot_link_an_account_to_itself(scope):
    with violates("identity_link_two_accounts"):
        link(scope, scope.alice, scope.alice)


def test_one_unrevoked_link_per_unordered_pair(scope):
    first = link(scope, scope.alice, scope.bob)
    with violates("identity_link_one_open_per_pair"):
        link(scope, scope.alice, scope.bob)
    with violates("identity_link_one_open_per_pair"):
        link(scope, scope.bob, scope.alice)
    IdentityLink.objects.filter(pk=first.pk).update(status="verified", verified_at=timezone.now())
    with violates("identity_link_one_open_per_pair"):
        link(scope, scope.bob, scope.alice)
    IdentityLink.objects.filter(pk=first.pk).update(status="revoked", revoked_at=timezone.now())
    # After revoking, a new link for the pair (either order) is allowed, but only one.
    link(scope, scope.bob, scope.alice)
    with violates("identity_link_one_open_per_pair"):
        link(scope, scope.alice, scope.bob)


def test_identity_link_status_times(scope):
    with violates("identity_link_verified_has_time"):
        link(scope, scope.alice, scope.bob, status="verified")  # no verified_at
    with violates("identity_link_revoked_has_time"):
        link(scope, scope.alice, scope.bob, status="revoked")  # no revoked_at
    with violates("identity_link_status_valid"):
        link(scope, scope.alice, scope.bob, status="live")


def test_identity_link_accounts_stay_in_the_workspace(scope):
    with violates("identity_link_linked_same_ws"):
        link(scope, scope.alice, scope.foreign_account)


# --- tokens --------------------------------------------------------------------------------


@pytest.fixture
def run(scope) -> Run:
    return Run.objects.create(
        workspace_id=scope.workspace.id,
        agent=scope.agent,
        conversation=scope.room,
        requester=scope.alice,
    )


def token(s: Scope, kind: str, **fields) -> ApiToken:
    return ApiToken.objects.create(
        workspace_id=s.workspace.id,
        kind=kind,
        digest=uuid.uuid4().hex * 2,
        prefix=f"fmn_{kind}_",
        **fields,
    )


@pytest.mark.parametrize(
    ("kind", "subject"),
    [
        ("service", {"agent": True}),
        ("service", {"agent": True, "run": True}),
        ("agent", {}),
        ("agent", {"agent": True, "run": True}),
        ("run", {"agent": True}),
        ("run", {"run": True}),
        ("run", {}),
        ("admin", {}),
    ],
)
def test_token_kind_must_match_its_subject(scope, run, kind, subject):
    fields = {}
    if subject.get("agent"):
        fields["agent"] = scope.agent
    if subject.get("run"):
        fields["run"] = run
    with violates("token_kind_matches_subject"):
        token(scope, kind, **fields)


def test_token_kinds_with_their_subjects_are_allowed(scope, run):
    token(scope, "service")
    token(scope, "agent", agent=scope.agent)
    token(scope, "run", agent=scope.agent, run=run)
    assert ApiToken.objects.count() == 3


def test_token_digest_is_unique(scope):
    first = token(scope, "service")
    with violates("messages_app_apitoken_digest"):
        ApiToken.objects.create(
            workspace_id=scope.workspace.id, kind="service", digest=first.digest, prefix="x"
        )


# --- lineage -------------------------------------------------------------------------------


def test_lineage_source_must_be_in_the_same_workspace(scope):
    reply = raw_message(scope, seq=1, sender_agent=scope.agent, role="assistant")
    foreign = raw_message(scope, seq=1, conversation=scope.foreign_room)
    with violates("lineage_source_same_ws"):
        MessageLineage.objects.create(
            workspace_id=scope.workspace.id, message=reply, source=foreign
        )
    with violates("lineage_message_same_ws"):
        MessageLineage.objects.create(
            workspace_id=scope.other_workspace.id, message=reply, source=foreign
        )
    # A source in another conversation of the same workspace is fine.
    source = raw_message(scope, seq=1, conversation=scope.other_room)
    MessageLineage.objects.create(workspace_id=scope.workspace.id, message=reply, source=source)


def test_lineage_cannot_point_at_itself(scope):
    reply = raw_message(scope, seq=1, sender_agent=scope.agent, role="assistant")
    with violates("lineage_not_self"):
        MessageLineage.objects.create(workspace_id=scope.workspace.id, message=reply, source=reply)


def test_only_agent_authored_messages_carry_lineage(scope):
    """The perspective rules skip the lineage look-up for a person's message, so the database
    must refuse lineage there, whoever writes it."""
    said = raw_message(scope, seq=1)
    source = raw_message(scope, seq=1, conversation=scope.other_room)
    with violates("only agent-authored messages carry lineage"):
        MessageLineage.objects.create(workspace_id=scope.workspace.id, message=said, source=source)
    reply = raw_message(scope, seq=2, sender_agent=scope.agent, role="assistant")
    link = MessageLineage.objects.create(
        workspace_id=scope.workspace.id, message=reply, source=source
    )
    with violates("only agent-authored messages carry lineage"):
        MessageLineage.objects.filter(pk=link.pk).update(message=said)


def test_a_message_sender_never_changes(scope):
    """Otherwise an agent reply with lineage could become a person's message and skip it."""
    reply = raw_message(scope, seq=1, sender_agent=scope.agent, role="assistant")
    with violates("a message's sender never changes"):
        Message.objects.filter(pk=reply.pk).update(sender_agent=None, sender_account=scope.alice)
    said = raw_message(scope, seq=2)
    with violates("a message's sender never changes"):
        Message.objects.filter(pk=said.pk).update(sender_account=scope.bob)
    # Saving a message with its sender unchanged is fine.
    said.content = "sample edited"
    said.save()


# --- extensions ----------------------------------------------------------------------------


def test_migrations_install_pg_trgm(db):
    with connection.cursor() as cursor:
        cursor.execute("SELECT extname FROM pg_extension")
        extensions = {name for (name,) in cursor.fetchall()}
    assert {"pg_trgm", "btree_gist"} <= extensions
