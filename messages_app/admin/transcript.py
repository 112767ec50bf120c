"""A conversation read top to bottom: the transcript's page of messages, its view, and links to it.

A deleted message's text never leaves ``transcript_page``: its line holds no text, whatever the
row holds (the package's security invariant).
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass
from datetime import datetime

from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db.models import F
from django.http import Http404, HttpRequest
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse

from messages_app.models import Conversation, Message

TRANSCRIPT_PAGE_SIZE = 100


def transcript_url(conversation_id: uuid.UUID, *, seq: int | None = None) -> str:
    """The conversation's transcript; with ``seq``, the page holding that message, at it."""
    url = reverse("admin:messages_app_conversation_transcript", args=[conversation_id])
    return url if seq is None else f"{url}?seq={seq}#seq-{seq}"


@dataclass(frozen=True)
class TranscriptLine:
    """One message as the transcript shows it: ``text`` is None for a deleted message."""

    id: uuid.UUID
    seq: int
    created_at: datetime
    sender: str
    role: str
    status: str
    text: str | None
    edited: bool
    reply_to_seq: int | None

    @property
    def deleted(self) -> bool:
        return self.text is None


@dataclass(frozen=True)
class TranscriptPage:
    number: int
    pages: int
    lines: list[TranscriptLine]


def transcript_page(
    conversation: Conversation, *, page: str | None = None, seq: str | None = None
) -> TranscriptPage:
    """One page of the conversation's messages in seq order, ``TRANSCRIPT_PAGE_SIZE`` seqs a
    page: page ``n`` is the seq range ``((n-1)*size, n*size]``, which the unique
    ``(conversation, seq)`` index reads directly at any depth (committed seqs have no gaps, so
    pages are full), and ``last_seq`` gives the page count without counting rows.

    ``page`` and ``seq`` are raw query values; anything that is not a number means page 1, and
    numbers are clamped to the pages there are. A deleted message's text never leaves here.
    """
    pages = max(1, math.ceil(conversation.last_seq / TRANSCRIPT_PAGE_SIZE))
    number = _positive_int(page) or 1
    wanted_seq = _positive_int(seq)
    if wanted_seq is not None:
        number = math.ceil(wanted_seq / TRANSCRIPT_PAGE_SIZE)
    number = min(number, pages)
    first = (number - 1) * TRANSCRIPT_PAGE_SIZE
    rows = (
        Message.objects.filter(
            workspace_id=conversation.workspace_id,
            conversation=conversation,
            seq__gt=first,
            seq__lte=first + TRANSCRIPT_PAGE_SIZE,
        )
        .select_related("sender_account", "sender_agent")
        .annotate(reply_to_seq=F("reply_to__seq"))
        .order_by("seq")
    )
    lines = [
        TranscriptLine(
            id=message.id,
            seq=message.seq,
            created_at=message.created_at,
            sender=str(message.sender_account or message.sender_agent),
            role=message.role,
            status=message.status,
            text=None if message.is_deleted else message.content,
            edited=message.edited_at is not None,
            reply_to_seq=message.reply_to_seq,
        )
        for message in rows
    ]
    return TranscriptPage(number=number, pages=pages, lines=lines)


def _positive_int(raw: str | None) -> int | None:
    if raw is None or not (raw.isascii() and raw.isdigit()) or len(raw) > 18:
        return None
    value = int(raw)
    return value if value > 0 else None


class TranscriptViewMixin:
    """The transcript's page on the conversation's admin, at ``<id>/transcript/``."""

    def get_urls(self) -> list[URLPattern]:
        transcript = path(
            "<path:object_id>/transcript/",
            self.admin_site.admin_view(self.transcript_view),
            name="messages_app_conversation_transcript",
        )
        return [transcript, *super().get_urls()]

    def transcript_view(self, request: HttpRequest, object_id: str) -> TemplateResponse:
        """The conversation read top to bottom: messages in seq order, paged, with senders'
        names; a deleted message is marked as such and its text is not on the page."""
        conversation = self.get_object(request, unquote(object_id))
        if conversation is None:
            raise Http404("No such conversation.")
        message_admin = self.admin_site._registry[Message]
        if not (
            self.has_view_permission(request, conversation)
            and message_admin.has_view_permission(request)
        ):
            raise PermissionDenied
        page = transcript_page(
            conversation, page=request.GET.get("page"), seq=request.GET.get("seq")
        )
        context = {
            **self.admin_site.each_context(request),
            "title": f"Transcript of {conversation}",
            "subtitle": None,
            "opts": self.opts,
            "conversation": conversation,
            "page": page,
            "media": self.media,
        }
        return TemplateResponse(request, "admin/messages_app/conversation/transcript.html", context)
