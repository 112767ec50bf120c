"""The HTTP floor: what any Python server on this machine costs for a request that does nothing.

``bench/benchmark.py`` serves this application with gunicorn on loopback and times it next to
every API request, so a target can be stated as the API over HTTP floor plus SQL floor: a
faster or slower machine moves both sides alike.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

BODY = b'{"ok": true}'
HEADERS = [("Content-Type", "application/json"), ("Content-Length", str(len(BODY)))]


def application(environ: dict, start_response: Callable) -> Iterable[bytes]:
    """200 with a fixed JSON body, whatever the request: no routing, no parsing, no work."""
    start_response("200 OK", HEADERS)
    return [BODY]
