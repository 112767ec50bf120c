"""The data lifecycle (messages_app/lifecycle/): retention at its boundaries, overrides and
holds, resumption after a failure midway, account erasure, and holds refusing every erasure.

Erasure is a delete: each test checks the same three things a delete guarantees (body gone,
search document gone, the live count in step) and that lineage is never touched.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.db import DatabaseError, connection
from django.utils import timezone

from audit_app.lifecycle import Actor
from audit_app.models import LifecycleEvent, LifecycleOutcome, LifecycleSubject
from formation.errors import InvalidArguments, NotFound
from messages_app import services
from messages_app.errors import LegalHoldActive
from messages_app.lifecycle import erasure, exports, holds, retention
from messages_app.models import (
    Account,
    Conversation,
    IdentityLink,
    LegalHold,
    Membership,
    Message,
    MessageLineage,
    MessageLineageRoom,
)
from search_app.models import MessageSearchDocument
from tests import factories

ACTOR = Actor(label="test")
# Every run in this file draws its line from here; messages are stamped before it.
NOW = timezone.now().replace(microsecond=0)


def days_before_now(days: float) -> object:
    return NOW - timedelta(days=days)


def is_erased(message: Message) -> bool:
    message.refresh_from_db()
    erased = message.deleted_at is not None
    if erased:
        assert message.content == ""
        assert not MessageSearchDocument.objects.filter(message_id=message.pk).exists()
    else:
        assert MessageSearchDocument.objects.filter(message_id=message.pk).exists()
    return erased


def live_count_is_true(conversation: Conversation) -> bool:
    conversation.refresh_from_db()
    live = Message.objects.filter(conversation=conversation, deleted_at__isnull=True).count()
    return conversation.live_message_count == live


def apply(**options) -> list[retention.RetentionReport]:
    return retention.retention_apply(actor=ACTOR, now=NOW, **options)


def hold(conversation: Conversation | None, workspace) -> LegalHold:
    return holds.hold_place(
        workspace_id=workspace.id,
        conversation_id=conversation.id if conversation else None,
        reference="matter-19",
        actor=ACTOR,
    )


# --- retention ----------------------------------------------------------------------------------


def test_retention_erases_exactly_what_is_older_than_the_period(world):
    retention.workspace_retention_set(workspace_id=world.workspace.id, days=30)
    older = factories.post(
        world.public, world.alice, created_at=days_before_now(30) - timedelta(microseconds=1)
    )
    exactly = factories.post(world.public, world.alice, created_at=days_before_now(30))
    newer = factories.post(world.public, world.bob, created_at=days_before_now(29))
    much_older = factories.post(world.private, world.bob, created_at=days_before_now(300))

    (report,) = apply()

    assert [is_erased(m) for m in (older, exactly, newer, much_older)] == [
        True,
        False,
        False,
        True,
    ]
    assert (report.messages, report.conversations, report.held_conversations) == (2, 2, 0)
    assert live_count_is_true(world.public)
    assert live_count_is_true(world.private)


def test_a_conversation_override_replaces_the_workspace_period(world):
    retention.workspace_retention_set(workspace_id=world.workspace.id, days=30)
    retention.conversation_retention_set(conversation=world.private, days=90)
    retention.conversation_retention_set(conversation=world.direct, days=None)
    public = factories.post(world.public, world.alice, created_at=days_before_now(60))
    private_kept = factories.post(world.private, world.alice, created_at=days_before_now(60))
    private_gone = factories.post(world.private, world.alice, created_at=days_before_now(91))
    direct = factories.post(world.direct, world.alice, created_at=days_before_now(3000))

    apply()

    assert [is_erased(m) for m in (public, private_kept, private_gone, direct)] == [
        True,
        False,
        True,
        False,
    ]
    assert retention.conversation_retention(conversation=world.direct) == (
        retention.ConversationRetention(days=None, inherited=False)
    )
    back = retention.conversation_retention_inherit(conversation=world.direct)
    assert back == retention.ConversationRetention(days=30, inherited=True)
    apply()
    assert is_erased(direct)


def test_an_override_applies_where_the_workspace_keeps_everything(world):
    retention.conversation_retention_set(conversation=world.private, days=10)
    public = factories.post(world.public, world.alice, created_at=days_before_now(365))
    private = factories.post(world.private, world.alice, created_at=days_before_now(11))

    (report,) = apply()

    assert (is_erased(public), is_erased(private)) == (False, True)
    assert report.messages == 1


def test_without_any_period_nothing_is_erased_and_nothing_recorded(world):
    message = factories.post(world.public, world.alice, created_at=days_before_now(10_000))

    assert apply() == []
    assert not is_erased(message)
    assert not LifecycleEvent.objects.exists()


def test_retention_skips_held_conversations_until_released(world):
    retention.workspace_retention_set(workspace_id=world.workspace.id, days=30)
    public = factories.post(world.public, world.alice, created_at=days_before_now(31))
    private = factories.post(world.private, world.alice, created_at=days_before_now(31))
    on_hold = hold(world.private, world.workspace)

    (report,) = apply()

    assert (is_erased(public), is_erased(private)) == (True, False)
    assert report.held_conversations == 1
    holds.hold_release(hold=on_hold, actor=ACTOR)
    apply()
    assert is_erased(private)


def test_a_workspace_hold_stops_retention_everywhere(world):
    retention.workspace_retention_set(workspace_id=world.workspace.id, days=30)
    messages = [
        factories.post(room, world.alice, created_at=days_before_now(31))
        for room in (world.public, world.private, world.direct)
    ]
    hold(None, world.workspace)

    (report,) = apply()

    assert [is_erased(m) for m in messages] == [False, False, False]
    assert (report.messages, report.held_conversations) == (0, 3)


def test_retention_never_crosses_workspaces(world):
    *_, elsewhere_message = factories.other_workspace()
    Message.objects.filter(pk=elsewhere_message.pk).update(created_at=days_before_now(900))
    retention.workspace_retention_set(workspace_id=world.workspace.id, days=1)

    (report,) = apply()

    assert report.workspace_id == world.workspace.id
    assert not is_erased(elsewhere_message)


def fail_when_erasing(message: Message) -> None:
    """A real PostgreSQL failure: updating this one message raises (test transaction only)."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"""CREATE FUNCTION lifecycle_test_fail() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                    IF NEW.id = '{message.pk}' THEN RAISE EXCEPTION 'failing midway'; END IF;
                    RETURN NEW;
                END $$"""
        )
        cursor.execute(
            "CREATE TRIGGER lifecycle_test_fail BEFORE UPDATE ON messages_app_message "
            "FOR EACH ROW EXECUTE FUNCTION lifecycle_test_fail()"
        )


def stop_failing() -> None:
    with connection.cursor() as cursor:
        cursor.execute("DROP TRIGGER lifecycle_test_fail ON messages_app_message")
        cursor.execute("DROP FUNCTION lifecycle_test_fail()")


def test_a_run_that_fails_midway_is_finished_by_the_next_and_erases_nothing_twice(world):
    retention.workspace_retention_set(workspace_id=world.workspace.id, days=30)
    expired = [
        factories.post(world.private, world.alice, created_at=days_before_now(40 - i))
        for i in range(5)
    ]
    kept = factories.post(world.private, world.alice, created_at=days_before_now(5))
    fail_when_erasing(expired[2])  # the first message of the second batch of two

    with pytest.raises(DatabaseError):
        apply(batch_size=2)

    first_run = {m.pk: m.deleted_at for m in expired[:2] if is_erased(m)}
    assert len(first_run) == 2
    assert [is_erased(m) for m in expired[2:]] == [False, False, False]
    assert live_count_is_true(world.private)
    stopped = LifecycleEvent.objects.get()
    assert (stopped.outcome, stopped.counts["messages"]) == (LifecycleOutcome.STARTED, 2)

    stop_failing()
    (report,) = apply(batch_size=2)

    assert report.messages == 3
    assert all(is_erased(m) for m in expired)
    assert not is_erased(kept)
    # The first run's erasures were not repeated: their times are the first run's.
    assert {m.pk: m.deleted_at for m in expired[:2]} == first_run
    assert live_count_is_true(world.private)
    finished = LifecycleEvent.objects.exclude(pk=stopped.pk).get()
    assert (finished.outcome, finished.counts["messages"]) == (LifecycleOutcome.COMPLETED, 3)
    (again,) = apply(batch_size=2)
    assert again.messages == 0


def test_retention_periods_are_checked(world):
    for days in (0, -1, 36_501):
        with pytest.raises(InvalidArguments):
            retention.workspace_retention_set(workspace_id=world.workspace.id, days=days)
    with pytest.raises(InvalidArguments):
        apply(batch_size=0)
    assert retention.workspace_retention(workspace_id=world.workspace.id) is None


# --- account erasure ----------------------------------------------------------------------------


def erase(account: Account, **options) -> erasure.ErasureReport:
    return erasure.account_erase(
        workspace_id=account.workspace_id, account_id=account.id, actor=ACTOR, **options
    )


def test_erasure_erases_what_the_account_wrote_and_keeps_the_row(world):
    link = services.identity_link_create(
        workspace_id=world.workspace.id, account_id=world.alice.id, linked_account_id=world.bob.id
    )
    services.identity_link_verify(link=link)
    world.bob.external_id = "bob-external"
    world.bob.save()
    written = [factories.post(room, world.bob) for room in (world.public, world.private)]
    others = factories.post(world.public, world.alice)
    memberships = set(Membership.objects.filter(account=world.bob).values_list("pk", "left_at"))

    report = erase(world.bob, batch_size=1)

    assert (report.messages, report.identity_links) == (2, 1)
    assert all(is_erased(m) for m in written)
    assert not is_erased(others)
    bob = Account.objects.get(pk=world.bob.pk)
    assert (bob.display_name, bob.external_id) == (erasure.ERASED_NAME, None)
    assert bob.erased_at == report.erased_at is not None
    assert not IdentityLink.objects.filter(pk=link.pk).exists()
    assert (
        set(Membership.objects.filter(account=world.bob).values_list("pk", "left_at"))
        == memberships
    )
    assert live_count_is_true(world.public)
    event = LifecycleEvent.objects.get()
    assert (event.outcome, event.subject_id, event.counts) == (
        LifecycleOutcome.COMPLETED,
        world.bob.id,
        {"messages": 2, "identityLinks": 1, "derivedMessagesMarked": 0, "adminLogEntries": 0},
    )
    again = erase(world.bob)
    assert (again.messages, again.identity_links, again.erased_at) == (0, 0, report.erased_at)


def test_erasure_keeps_every_lineage_row_and_marks_what_was_derived(world):
    source = factories.post(world.private, world.bob, "sample private plan")
    reply = factories.post(world.public, world.agent, "sample answer", lineage=[source.id])
    second = factories.post(world.public, world.agent, "sample second", lineage=[reply.id])
    lineage = set(MessageLineage.objects.values_list("message_id", "source_id", "direct"))
    rooms = set(MessageLineageRoom.objects.values_list("message_id", "conversation_id"))

    report = erase(world.bob)

    assert report.derived_marked == 2
    assert set(MessageLineage.objects.values_list("message_id", "source_id", "direct")) == lineage
    assert set(MessageLineageRoom.objects.values_list("message_id", "conversation_id")) == rooms
    for derived in (reply, second):
        derived.refresh_from_db()
        assert derived.sources_erased
        assert not is_erased(derived)


def test_erasure_of_another_workspace_account_is_not_found(world):
    elsewhere, *_ = factories.other_workspace()
    stranger = factories.make_account(elsewhere)
    with pytest.raises(NotFound):
        erasure.account_erase(workspace_id=world.workspace.id, account_id=stranger.id, actor=ACTOR)
    with pytest.raises(NotFound):
        erasure.account_erase(workspace_id=world.workspace.id, account_id=uuid.uuid4(), actor=ACTOR)


def test_an_erasure_that_failed_midway_is_finished_by_calling_it_again(world):
    written = [
        factories.post(world.private, world.bob, created_at=factories.at(i)) for i in range(4)
    ]
    fail_when_erasing(written[2])

    with pytest.raises(DatabaseError):
        erase(world.bob, batch_size=2)

    assert [is_erased(m) for m in written] == [True, True, False, False]
    assert Account.objects.get(pk=world.bob.pk).erased_at is None
    stop_failing()
    report = erase(world.bob, batch_size=2)
    assert report.messages == 2
    assert all(is_erased(m) for m in written)
    assert live_count_is_true(world.private)


def test_a_hold_placed_while_an_erasure_runs_stops_it_at_the_next_batch(world):
    written = [
        factories.post(world.private, world.bob, created_at=factories.at(i)) for i in range(3)
    ]
    # As the first batch erases its message, a hold on the room commits with it: the hold
    # arrives between two batches, as one placed through the API in that moment would.
    with connection.cursor() as cursor:
        cursor.execute(
            """CREATE FUNCTION lifecycle_test_hold() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                    INSERT INTO messages_app_legalhold
                        (id, workspace_id, conversation_id, reference, placed_at)
                    VALUES (gen_random_uuid(), NEW.workspace_id, NEW.conversation_id, '', now());
                    RETURN NULL;
                END $$"""
        )
        cursor.execute(
            "CREATE TRIGGER lifecycle_test_hold AFTER UPDATE ON messages_app_message "
            f"FOR EACH ROW WHEN (NEW.id = '{written[0].pk}' AND NEW.deleted_at IS NOT NULL) "
            "EXECUTE FUNCTION lifecycle_test_hold()"
        )

    with pytest.raises(LegalHoldActive) as refused:
        erase(world.bob, batch_size=1)

    placed = LegalHold.objects.get()
    assert refused.value.details == {"holdId": str(placed.id)}
    assert [is_erased(m) for m in written] == [True, False, False]
    assert Account.objects.get(pk=world.bob.pk).display_name == world.bob.display_name
    event = LifecycleEvent.objects.get()
    assert (event.outcome, event.hold_id, event.counts["messages"]) == (
        LifecycleOutcome.REFUSED,
        placed.id,
        1,
    )


# --- holds refuse delete and erasure ------------------------------------------------------------


def test_a_hold_refuses_delete_and_erasure_and_changes_nothing(world):
    held = factories.post(world.private, world.bob, "sample held")
    factories.post(world.public, world.bob, "sample elsewhere")
    on_hold = hold(world.private, world.workspace)
    before = factories.table_snapshot()

    with pytest.raises(LegalHoldActive) as refused_delete:
        services.message_delete(message=held)
    with pytest.raises(LegalHoldActive) as refused_erasure:
        erase(world.bob)

    assert refused_delete.value.details == {"holdId": str(on_hold.id)}
    assert refused_erasure.value.details == {"holdId": str(on_hold.id)}
    assert factories.table_snapshot() == before
    holds.hold_release(hold=on_hold, actor=ACTOR)
    services.message_delete(message=held)
    assert is_erased(held)


def test_a_workspace_hold_refuses_erasure_of_any_account(world):
    on_hold = hold(None, world.workspace)
    factories.post(world.public, world.alice)
    before = factories.table_snapshot()
    with pytest.raises(LegalHoldActive) as refused:
        erase(world.bob)  # Bob wrote nothing: the hold keeps his identity all the same
    assert refused.value.details == {"holdId": str(on_hold.id)}
    assert factories.table_snapshot() == before


def test_a_hold_elsewhere_does_not_stop_erasure(world):
    hold(world.private, world.workspace)
    written = factories.post(world.public, world.bob)

    assert erase(world.bob).messages == 1
    assert is_erased(written)


def test_an_account_is_held_by_a_hold_on_the_workspace_or_on_a_room_with_its_live_messages(world):
    def refused(account: Account) -> uuid.UUID | None:
        try:
            holds.refuse_if_account_held(workspace_id=world.workspace.id, account_id=account.id)
        except LegalHoldActive as refusal:
            return uuid.UUID(refusal.details["holdId"])
        return None

    factories.post(world.private, world.bob)
    deleted = factories.post(world.public, world.alice)
    services.message_delete(message=deleted)
    on_private = hold(world.private, world.workspace)
    hold(world.public, world.workspace)  # only Alice's deleted message is there

    assert (refused(world.bob), refused(world.alice)) == (on_private.id, None)
    on_workspace = hold(None, world.workspace)
    holds.hold_release(hold=on_private, actor=ACTOR)
    assert (refused(world.bob), refused(world.alice)) == (on_workspace.id, on_workspace.id)


def test_holds_are_recorded_and_released_once(world):
    on_hold = hold(world.private, world.workspace)
    released = holds.hold_release(hold=on_hold, actor=ACTOR)

    assert released.released_at is not None
    with pytest.raises(InvalidArguments):
        holds.hold_release(hold=on_hold, actor=ACTOR)
    assert list(LifecycleEvent.objects.order_by("created_at").values_list("action", "hold_id")) == [
        ("hold_placed", on_hold.id),
        ("hold_released", on_hold.id),
    ]
    _, _, elsewhere_room, _ = factories.other_workspace()
    with pytest.raises(InvalidArguments):
        holds.hold_place(
            workspace_id=world.workspace.id,
            conversation_id=elsewhere_room.id,
            reference="",
            actor=ACTOR,
        )


# --- export -------------------------------------------------------------------------------------


def exported_ids(batches) -> list[uuid.UUID]:
    return [message.id for batch in batches for message in batch]


def test_exports_page_through_everything_in_order(world):
    same_time = factories.at(5)
    bob = [factories.post(world.private, world.bob, created_at=same_time) for _ in range(3)]
    bob.append(factories.post(world.public, world.bob, created_at=factories.at(1)))
    alice = factories.post(world.private, world.alice, created_at=factories.at(2))
    gone = factories.post(world.private, world.bob, created_at=factories.at(6))
    services.message_delete(message=gone)

    conversation = exports.conversation_export_batches(
        workspace_id=world.workspace.id, conversation_id=world.private.id, batch_size=2
    )
    account = exports.account_export_batches(
        workspace_id=world.workspace.id, account_id=world.bob.id, batch_size=2
    )
    workspace = exports.workspace_export_batches(workspace_id=world.workspace.id, batch_size=1)

    assert exported_ids(conversation) == [m.id for m in (*bob[:3], alice)]
    assert exported_ids(account) == [bob[3].id, *sorted(m.id for m in bob[:3])]
    assert exported_ids(workspace) == [bob[3].id, *(m.id for m in (*bob[:3], alice))]
    other = exports.conversation_export_batches(
        workspace_id=factories.make_workspace().id, conversation_id=world.private.id
    )
    assert exported_ids(other) == []


def test_an_export_is_recorded_before_its_first_line_and_finished_as_it_ends(world):
    for i in range(3):
        factories.post(world.private, world.alice, f"sample {i}")

    def start() -> exports.Export:
        return exports.export_start(
            workspace_id=world.workspace.id,
            subject_kind=LifecycleSubject.CONVERSATION,
            subject_id=world.private.id,
            actor=ACTOR,
            batch_size=2,
        )

    whole, left = start(), start()
    assert LifecycleEvent.objects.filter(outcome=LifecycleOutcome.STARTED).count() == 2
    assert sum(1 for _ in whole.chunks(len)) == 2
    chunks = left.chunks(len)
    next(chunks)
    chunks.close()  # the reader went away after the first page

    recorded = dict(LifecycleEvent.objects.values_list("pk", "outcome"))
    assert recorded == {
        whole.event_id: LifecycleOutcome.COMPLETED,
        left.event_id: LifecycleOutcome.INTERRUPTED,
    }
    assert LifecycleEvent.objects.get(pk=whole.event_id).counts == {"messages": 3}
    assert LifecycleEvent.objects.get(pk=left.event_id).counts == {"messages": 2}
