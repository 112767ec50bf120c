"""What a history search takes and answers: its filters, its hits and the search's result.

These are plain values, so the request and response shapes (``search_app.serializers``) can
import them without importing the statement that reads them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from messages_app.selectors import MessageRow
from search_app.limits import Budget

SPEAKERS = ("anyone", "requester", "you")


@dataclass(frozen=True)
class HistoryFilters:
    speaker: str = "anyone"
    after: datetime | None = None
    before: datetime | None = None


@dataclass
class Hit:
    message: MessageRow
    components: dict[str, float]
    values: dict[str, float]
    conversation_title: str = ""
    conversation_kind: str = ""
    speaker_name: str = ""
    # ts_headline's output for the text, marked with ``query.highlights.highlight_markers()``.
    marked: str | None = None
    before: list[MessageRow] = field(default_factory=list)
    after: list[MessageRow] = field(default_factory=list)
    # Each contribution rounded to six decimals as the search's audit event recorded it (the
    # statement rounds it; Python's rounding of a float can differ in the last digit).
    recorded: dict[str, float] | None = None

    @property
    def score(self) -> float:
        """The sum of the contributions: what ``score`` on the wire rounds."""
        return sum(self.components.values())


@dataclass
class HistoryResult:
    """What the history statement read: the hits best first (neighbours attached), which of
    the returned messages are already the run's evidence, and the exclusion counts."""

    hits: list[Hit]
    seen: set
    exclusions: dict[str, int]
    capped: bool


@dataclass
class HistorySearch:
    """What a search_history call answers: the hits the budget let through, their highlight
    offsets, the budget after it, and how many hits the budget cut."""

    hits: list[Hit]
    highlights: list[list[list[int]]]
    budget: Budget
    trimmed: int
