"""Concurrent writers to one conversation get gapless, unique seqs (SPEC §2).

These tests commit for real (``transaction=True``): each thread has its own connection and its
own transactions, so the conversation's row lock, not the test wrapper, is what serialises them.
A rolled-back insert must give its seq back, so the committed seqs are exactly 1..N.
"""

from __future__ import annotations

import pytest
from django.db import transaction

from messages_app import services
from messages_app.models import Conversation, Message
from tests import factories

THREADS = 8
PER_THREAD = 25


class Abandoned(Exception):
    """Raised inside a transaction to roll it back on purpose."""


def make_room():
    workspace = factories.make_workspace()
    account = factories.make_account(workspace, "Writer Example")
    room = factories.make_conversation(workspace, "private", "busy room")
    factories.join(room, account)
    return account, room


def seqs(room: Conversation) -> list[int]:
    return list(
        Message.objects.filter(conversation=room).order_by("seq").values_list("seq", flat=True)
    )


def post(room: Conversation, account_id, content: str) -> Message:
    return services.message_create(
        conversation=room,
        draft=services.MessageDraft(content=content, sender_account_id=account_id),
    )


@pytest.mark.django_db(transaction=True)
def test_concurrent_writers_get_gapless_unique_seqs():
    account, room = make_room()

    def work(index: int) -> None:
        # A fresh Conversation instance per thread, as each request would load its own.
        mine = Conversation.objects.get(pk=room.pk)
        for n in range(PER_THREAD):
            post(mine, account.id, f"sample {index}-{n}")

    assert factories.run_in_threads(THREADS, work) == []

    total = THREADS * PER_THREAD
    assert seqs(room) == list(range(1, total + 1))
    room.refresh_from_db()
    assert room.last_seq == total
    assert room.live_message_count == total
    # Within each writer, later messages got higher seqs.
    for index in range(THREADS):
        mine = list(
            Message.objects.filter(conversation=room, content__startswith=f"sample {index}-")
            .order_by("seq")
            .values_list("content", flat=True)
        )
        assert mine == [f"sample {index}-{n}" for n in range(PER_THREAD)]


@pytest.mark.django_db(transaction=True)
def test_rolled_back_writers_leave_committed_seqs_gapless():
    account, room = make_room()

    def work(index: int) -> None:
        mine = Conversation.objects.get(pk=room.pk)
        for n in range(PER_THREAD):
            # Odd threads abandon every third message after it was inserted (seq taken).
            if index % 2 and n % 3 == 0:
                try:
                    with transaction.atomic():
                        post(mine, account.id, f"abandoned {index}-{n}")
                        raise Abandoned
                except Abandoned:
                    pass
            else:
                post(mine, account.id, f"sample {index}-{n}")

    assert factories.run_in_threads(THREADS, work) == []

    abandoned_per_odd_thread = len(range(0, PER_THREAD, 3))
    committed = THREADS * PER_THREAD - (THREADS // 2) * abandoned_per_odd_thread
    assert seqs(room) == list(range(1, committed + 1))
    assert not Message.objects.filter(content__startswith="abandoned").exists()
    room.refresh_from_db()
    assert room.last_seq == committed
    assert room.live_message_count == committed
    # The next write continues right after the last committed seq.
    assert post(room, account.id, "sample after").seq == committed + 1
