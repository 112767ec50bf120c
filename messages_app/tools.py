"""The bodies of list_messages, get_message and search_messages, for REST and MCP alike.

Each takes the authenticated caller and already-validated arguments and answers the JSON body
of SPEC §5. With a run token, what it returns is recorded as the run's evidence in the same
transaction as the read (``services.tool_call``), every message carries ``deliverable``, and a
run whose ``toolScope`` is ``deliverable`` is shown only what its destination may receive (the
run's lens, ``selectors.RunLens``).
"""

from __future__ import annotations

import uuid
from typing import Any

from audit_app import services as audit
from audit_app.models import SearchTool
from formation.auth import Caller
from messages_app import selectors, services
from messages_app.serializers import message_summary


def list_messages(caller: Caller, params: dict[str, Any]) -> dict[str, Any]:
    scope = {
        "workspace_id": caller.workspace_id,
        "agent_id": caller.agent_id,
        "conversation_id": params["conversationId"],
        "limit": params["limit"],
    }
    with services.tool_call(
        workspace_id=caller.workspace_id, run_id=caller.run_id, tool="list_messages"
    ) as call:
        if "direction" in params:
            page = selectors.message_list_around(
                **scope,
                anchor_id=params["anchorId"],
                direction=params["direction"],
                lens=call.lens,
            )
        else:
            page = selectors.message_list(
                **scope,
                offset=params["offset"],
                before_date=params.get("beforeDate"),
                lens=call.lens,
            )
        call.returned(page.items)
    body = {
        "items": [message_summary(m) for m in page.items],
        "total": page.total,
        "limit": page.limit,
        "hasOlder": page.has_older,
        "hasNewer": page.has_newer,
    }
    if page.offset is not None:
        body["offset"] = page.offset
    return body


def get_message(caller: Caller, message_id: uuid.UUID) -> dict[str, Any]:
    with services.tool_call(
        workspace_id=caller.workspace_id, run_id=caller.run_id, tool="get_message"
    ) as call:
        message = selectors.message_get(
            workspace_id=caller.workspace_id,
            agent_id=caller.agent_id,
            message_id=message_id,
            lens=call.lens,
        )
        call.returned([message])
    return message_summary(message)


def search_messages(caller: Caller, params: dict[str, Any]) -> dict[str, Any]:
    """Audited like every search (``audit_app``): the event is written before the answer,
    in the run's transaction when there is a run, and the call fails closed without it."""
    with services.tool_call(
        workspace_id=caller.workspace_id, run_id=caller.run_id, tool="search_messages"
    ) as call:
        items = selectors.message_search(
            workspace_id=caller.workspace_id,
            agent_id=caller.agent_id,
            query=params["query"],
            limit=params["limit"],
            conversation_id=params.get("conversationId"),
            lens=call.lens,
        )
        audit.lookup_event_record(
            tool=SearchTool.SEARCH_MESSAGES,
            workspace_id=caller.workspace_id,
            agent_id=caller.agent_id,
            run_id=caller.run_id,
            destination_id=call.destination_id,
            requester_id=call.requester_id,
            query_text=params["query"],
            filters={
                "conversationId": str(params["conversationId"])
                if params.get("conversationId")
                else None,
                "limit": params["limit"],
            },
            result_ids=[message.id for message in items],
        )
        call.returned(items)
    return {
        "items": [message_summary(m) for m in items],
        "total": len(items),
        "limit": params["limit"],
    }
