"""``Cache-Control: no-store, private`` on every ``/api/v1/`` answer.

Each answer is one caller's view of the history. Without the header, a shared cache set up in
front of the service would be trusted to skip answers to requests carrying ``Authorization``;
with it, a misconfigured cache still stores nothing.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse
from django.utils.cache import patch_cache_control


class NoStoreMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if request.path.startswith("/api/v1/"):
            patch_cache_control(response, no_store=True, private=True)
        return response
