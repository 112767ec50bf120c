"""The numbers a run's searches are held to, shared by the services, the argument serializers
and the tool's description (SPEC §5), and a run's budget as search_history and GET /runs/{id}
report it."""

from __future__ import annotations

from dataclasses import dataclass

# Distinct messages (hits and neighbours) a run may bring in through search_history.
EVIDENCE_BUDGET = 400
MAX_HITS = 20
DEFAULT_HITS = 8
MAX_MEMORIES = 50
# Words one search_history query may hold (each is a term of the ranked statement).
MAX_QUERY_TERMS = 24
DEFAULT_MEMORIES = 10


@dataclass(frozen=True)
class Budget:
    """What a run has spent of search_history's evidence budget."""

    used: int
    limit: int = EVIDENCE_BUDGET

    @property
    def remaining(self) -> int:
        return max(self.limit - self.used, 0)
