"""Per-token request rates (DRF throttling), answered as 429 ``rate_limited``.

Each token has its own budget: scope ``service`` for the runtime's service tokens, scope
``agent`` for agent and run tokens (``REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]``, from the
``RATE_LIMIT_SERVICE`` and ``RATE_LIMIT_AGENT`` environment variables). DRF's own
``SimpleRateThrottle`` keeps a list of every request time in the cache and rewrites it on each
request, which costs O(rate) per call at generous rates and loses counts between threads; this
one keeps a counter per token and fixed window (``cache.add`` then ``cache.incr``, both atomic
in the local-memory cache), so a request costs O(1) and a burst at a window boundary can reach
at most twice the rate.

Counts live in the ``throttle`` cache, which is per process: with several gunicorn workers a
token can make up to workers times the rate; point that cache at a shared backend for an exact
count.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from django.core.cache import caches
from rest_framework.settings import api_settings
from rest_framework.throttling import BaseThrottle

if TYPE_CHECKING:
    # Only for annotations: DRF imports this module while rest_framework.views loads.
    from rest_framework.request import Request
    from rest_framework.views import APIView

PERIOD_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
CACHE_ALIAS = "throttle"


def parse_rate(rate: str | None) -> tuple[int, int] | None:
    """``"600/min"`` → ``(600, 60)``; ``None`` means no limit. The format is DRF's."""
    if rate is None:
        return None
    count, _, period = rate.partition("/")
    return int(count), PERIOD_SECONDS[period[0]]


class TokenRateThrottle(BaseThrottle):
    """Keyed by the token id, never by address: all callers are authenticated tokens."""

    timer = time.time

    def __init__(self) -> None:
        self.retry_after: float | None = None

    def allow_request(self, request: Request, view: APIView) -> bool:
        caller = request.user
        if caller is None:
            # Unauthenticated requests never reach a view (authentication is required).
            return True
        scope = "service" if caller.is_service else "agent"
        limit = parse_rate(api_settings.DEFAULT_THROTTLE_RATES.get(scope))
        if limit is None:
            return True
        allowed, period = limit
        now = self.timer()
        window = int(now // period)
        key = f"throttle:{scope}:{caller.token_id}:{period}:{window}"
        cache = caches[CACHE_ALIAS]
        # The entry outlives its window by a second so incr() never races its expiry.
        cache.add(key, 0, timeout=period + 1)
        try:
            count = cache.incr(key)
        except ValueError:
            # Evicted between add() and incr(): start the window over rather than fail.
            cache.set(key, 1, timeout=period + 1)
            count = 1
        if count <= allowed:
            return True
        self.retry_after = (window + 1) * period - now
        return False

    def wait(self) -> float | None:
        return self.retry_after
