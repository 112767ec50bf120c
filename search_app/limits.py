"""The numbers a run's searches are held to, shared by the services, the argument serializers
and the tool's description (SPEC §5)."""

# Distinct messages (hits and neighbours) a run may bring in through search_history.
EVIDENCE_BUDGET = 400
MAX_HITS = 20
DEFAULT_HITS = 8
MAX_MEMORIES = 50
DEFAULT_MEMORIES = 10
