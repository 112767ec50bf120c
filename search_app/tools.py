"""The body of search_history, for REST and MCP alike."""

from __future__ import annotations

from typing import Any

from formation.auth import Caller
from search_app import services
from search_app.serializers import SearchHistorySerializer, search_history_body


def search_history(caller: Caller, arguments: SearchHistorySerializer) -> dict[str, Any]:
    """Run a validated search_history call for a run token and answer SPEC §5's body."""
    result = services.search_history(
        workspace_id=caller.workspace_id,
        run_id=caller.run_id,
        query_text=arguments.validated_data["query"],
        filters=arguments.history_filters(),
        limit=arguments.hit_limit(),
    )
    return search_history_body(result)
