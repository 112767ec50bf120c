"""A legal hold binds every erasure and edit that commits after it
(messages_app/lifecycle/holds.py).

These tests commit for real (``transaction=True``): each thread has its own connection, so the
per-workspace advisory lock, not the test wrapper, is what orders the hold and the delete or edit.
"""

from __future__ import annotations

import threading

import pytest
from django.db import connection, transaction

from audit_app.lifecycle import Actor
from messages_app import services
from messages_app.errors import LegalHoldActive
from messages_app.lifecycle import holds
from messages_app.models import Message
from tests import factories

WAIT = 30


def in_thread(work) -> threading.Thread:
    def run() -> None:
        try:
            work()
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def second_waits(first, started: threading.Event, release: threading.Event, second) -> bool:
    """Run ``first`` until it sets ``started`` (inside its transaction), then ``second``: whether
    ``second`` was still waiting half a second later, for ``first``'s transaction, which ends
    once ``release`` is set. Both have finished when it returns."""
    holder = in_thread(first)
    assert started.wait(WAIT)
    waiter = in_thread(second)
    waiter.join(0.5)
    waited = waiter.is_alive()
    release.set()
    holder.join(WAIT)
    waiter.join(WAIT)
    return waited


def hold_room(workspace, room) -> object:
    return holds.hold_place(
        workspace_id=workspace.id, conversation_id=room.id, reference="", actor=Actor(label="test")
    )


# What a hold refuses, done to a message.
CHANGES = {
    "delete": lambda message: services.message_delete(message=message),
    "edit": lambda message: services.message_edit(message=message, content="sample rewritten"),
}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_change_waiting_on_a_hold_being_placed_is_refused_once_it_commits(change):
    workspace = factories.make_workspace()
    alice = factories.make_account(workspace)
    room = factories.make_conversation(workspace, "private")
    message = factories.post(room, alice, "sample held")
    placed, release = threading.Event(), threading.Event()
    outcome: dict[str, object] = {}

    def place() -> None:
        with transaction.atomic():
            outcome["hold"] = hold_room(workspace, room)
            placed.set()
            release.wait(WAIT)

    def attempt() -> None:
        try:
            CHANGES[change](Message.objects.get(pk=message.pk))
            outcome["changed"] = True
        except LegalHoldActive as refused:
            outcome["refused"] = refused.details["holdId"]

    assert second_waits(place, placed, release, attempt)
    assert outcome == {"hold": outcome["hold"], "refused": str(outcome["hold"].id)}
    message.refresh_from_db()
    assert (message.content, message.deleted_at, message.edited_at) == ("sample held", None, None)


@pytest.mark.django_db(transaction=True)
def test_a_hold_placed_while_an_edit_is_in_flight_waits_for_it_to_commit():
    """The edit checked for a hold before the hold existed: the hold is placed only once the
    edit has committed, so no edit commits after a hold it did not see."""
    workspace = factories.make_workspace()
    alice = factories.make_account(workspace)
    room = factories.make_conversation(workspace, "private")
    message = factories.post(room, alice, "sample before")
    edited, release = threading.Event(), threading.Event()
    order: list[str] = []

    def edit() -> None:
        with transaction.atomic():
            services.message_edit(
                message=Message.objects.get(pk=message.pk), content="sample after"
            )
            edited.set()
            release.wait(WAIT)
        order.append("edit committed")

    def place() -> None:
        hold_room(workspace, room)
        order.append("hold placed")

    assert second_waits(edit, edited, release, place)
    assert order == ["edit committed", "hold placed"]
    message.refresh_from_db()
    assert message.content == "sample after"
    with pytest.raises(LegalHoldActive):
        services.message_edit(message=message, content="sample too late")
