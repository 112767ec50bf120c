"""Answers that fit a model's context: each message text cut to a window of at most a given
number of characters (``maxTextLength``, docs/api.md "Long texts").

A text longer than the bound is cut to a window around its first match (a search hit's first
highlighted word, a literal search's first occurrence of its query), or from its start where
there is nothing to centre on (a neighbour, a page of a conversation). The answer marks the
cut (``cut: {start, end, length}``, code point offsets into the whole text); the whole text is
one get_message away. Offsets count Unicode code points, as highlights do.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from messages_app.limits import MAX_CONTENT_CHARS

# The smallest bound a caller may ask for, and the one the MCP tools apply when none is given:
# 500 characters keep a default search_history answer (8 hits, each with up to four
# neighbours) under 64 KiB over MCP (docs/mcp.md, "Long texts").
MIN_TEXT_BOUND = 100
MAX_TEXT_BOUND = MAX_CONTENT_CHARS
MCP_TEXT_BOUND = 500
# Of a window around a match, the share of the bound given to the text before the match.
LEAD_SHARE = 0.25
# The argument, described alike on every tool that takes it, and its MCP default.
TEXT_BOUND_NOTE = (
    f"Cut each message's content to at most this many characters, {MIN_TEXT_BOUND} to "
    f"{MAX_TEXT_BOUND}: a longer text is cut to a window around its first match (or from its "
    "start) and carries cut: {start, end, length}; get_message returns it whole. Over MCP the "
    f"default is {MCP_TEXT_BOUND}; over REST texts are whole unless this is given."
)
MCP_TEXT_DEFAULTS = {"maxTextLength": MCP_TEXT_BOUND}


@dataclass(frozen=True)
class TextCut:
    """Where a cut text's window lies in the whole text: ``[start, end)`` of ``length``."""

    start: int
    end: int
    length: int


def text_window(
    text: str, bound: int, focus: tuple[int, int] | None = None
) -> tuple[str, TextCut | None]:
    """``text`` itself when it fits in ``bound`` characters; else the window of ``bound``
    characters holding ``focus`` (``(start, length)``) with a quarter of the bound before it,
    or the text's start without a focus, and where it lies."""
    if len(text) <= bound:
        return text, None
    start = 0
    if focus is not None:
        begin, length = focus
        lead = int(bound * LEAD_SHARE)
        start = begin - lead if length <= bound - lead else begin
        start = max(0, min(start, len(text) - bound))
    end = start + bound
    return text[start:end], TextCut(start=start, end=end, length=len(text))


def bounded(message: Any, bound: int | None, focus: tuple[int, int] | None = None) -> Any:
    """``message`` with its ``content`` cut to ``bound`` characters (a copy, marked with
    ``text_cut``); the message itself when there is no bound or its text fits."""
    if bound is None:
        return message
    window, cut = text_window(message.content, bound, focus)
    if cut is None:
        return message
    if hasattr(message, "_replace"):  # a row (``selectors.MessageRow``)
        return message._replace(content=window, text_cut=cut)
    shown = copy.copy(message)
    shown.content = window
    shown.text_cut = cut
    return shown


def bounded_all(messages: Iterable[Any], bound: int | None) -> list[Any]:
    """Each message cut from its start."""
    return [bounded(message, bound) for message in messages]


def literal_focus(text: str, needle: str) -> tuple[int, int] | None:
    """The first case-insensitive occurrence of ``needle`` in ``text``, as search_messages
    matches it, for the window to centre on."""
    found = re.search(re.escape(needle), text, re.IGNORECASE)
    return None if found is None else (found.start(), found.end() - found.start())


def spans_in_window(spans: list[list[int]], cut: TextCut | None) -> list[list[int]]:
    """Highlights ``[start, length]`` of the whole text as offsets into its window: those
    outside it left out, those across its edges clipped to it."""
    if cut is None:
        return spans
    shown = []
    for start, length in spans:
        begin, end = max(start, cut.start), min(start + length, cut.end)
        if begin < end:
            shown.append([begin - cut.start, end - begin])
    return shown
