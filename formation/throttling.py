"""Per-token request rates (DRF throttling), answered as 429 ``rate_limited``.

Each token has its own budget: scope ``service`` for the runtime's service tokens, scope
``agent`` for agent and run tokens (``REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]``, from the
``RATE_LIMIT_SERVICE`` and ``RATE_LIMIT_AGENT`` environment variables). DRF's own
``SimpleRateThrottle`` keeps a list of every request time in the cache and rewrites it on each
request, which costs O(rate) per call at generous rates and loses counts between threads; this
one keeps a counter per token and fixed window (``cache.add`` then ``cache.incr``, both atomic
in the local-memory cache), so a request costs O(1) and a burst at a window boundary can reach
at most twice the rate.

Counts live in the ``throttle`` cache. With ``REDIS_URL`` set it is Django's ``RedisCache``,
shared by every worker and host, so the rate holds for the whole deployment (``add`` is
``SET NX``, ``incr`` Redis's atomic ``INCR``); without it, a local-memory cache per process, so
with several gunicorn workers a token can make up to workers times the rate.

A throttle never fails a request: when the store cannot answer (Redis down or slower than
``REDIS_TIMEOUT_MS``) the request is let through, ``formation_throttle_store_errors_total``
counts it, a warning is logged at most once per ``WARN_EVERY_SECONDS``, and the store is left
alone for ``RETRY_STORE_AFTER_SECONDS`` so an outage does not add its timeout to every request.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from django.conf import settings
from django.core.cache import caches
from rest_framework.settings import api_settings
from rest_framework.throttling import BaseThrottle

if TYPE_CHECKING:
    # Only for annotations: DRF imports this module while rest_framework.views loads.
    from rest_framework.request import Request
    from rest_framework.views import APIView

from formation import metrics

logger = logging.getLogger("formation.throttling")

PERIOD_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
CACHE_ALIAS = "throttle"
WARN_EVERY_SECONDS = 60.0
RETRY_STORE_AFTER_SECONDS = 1.0
# Monotonic times, per process: until when the store is skipped, when we last warned.
_store = {"skip_until": 0.0, "warned_at": float("-inf")}


def _store_failed(problem: Exception) -> None:
    """Fail open: count it, warn now and then (the error's class only, never the key)."""
    now = time.monotonic()
    _store["skip_until"] = now + RETRY_STORE_AFTER_SECONDS
    if settings.METRICS_ENABLED:
        metrics.THROTTLE_STORE_ERRORS.inc()
    if now - _store["warned_at"] >= WARN_EVERY_SECONDS:
        _store["warned_at"] = now
        logger.warning(
            "throttle store unavailable (%s); requests are not rate limited meanwhile",
            type(problem).__name__,
        )


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
        if time.monotonic() < _store["skip_until"]:
            if settings.METRICS_ENABLED:
                metrics.THROTTLE_STORE_ERRORS.inc()
            return True
        try:
            count = self.count(key, period)
        except Exception as problem:
            _store_failed(problem)
            return True
        if count <= allowed:
            return True
        if settings.METRICS_ENABLED:
            metrics.RATE_LIMITED.labels(scope).inc()
        self.retry_after = (window + 1) * period - now
        return False

    @staticmethod
    def count(key: str, period: int) -> int:
        """This request's number in the key's window."""
        cache = caches[CACHE_ALIAS]
        # The entry outlives its window by a second so incr() never races its expiry.
        cache.add(key, 0, timeout=period + 1)
        try:
            return cache.incr(key)
        except ValueError:
            # Evicted (or expired) between add() and incr(): start the window over.
            cache.set(key, 1, timeout=period + 1)
            return 1

    def wait(self) -> float | None:
        return self.retry_after
