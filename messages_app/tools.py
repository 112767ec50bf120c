"""list_messages, get_message and search_messages: their definitions and bodies, registered
into ``formation.tools`` when this app is ready (REST, ``GET /tools`` and MCP all use them).

Each body takes the call and already-validated arguments and answers the JSON body of SPEC §5.
With a run token the registry holds the run for the call, and what a body reports with
``call.returned`` is recorded as the run's evidence in the same transaction as the read; every
message carries ``deliverable``, and a run whose ``toolScope`` is ``deliverable`` is shown only
what its destination may receive (the run's lens, ``messages_app.lens.RunLens``, on
``call.lens``).
"""

from __future__ import annotations

from typing import Any

from audit_app import services as audit
from audit_app.models import SearchTool
from formation.auth import IsAgentOrRunToken
from formation.fields import Id, StrictSerializer
from formation.tools import AgentTool, ToolCall, register
from messages_app import selectors
from messages_app.serializers import (
    ListMessagesQuery,
    MessagePage,
    MessageSearchResult,
    SearchMessagesQuery,
    ToolMessageSummary,
)
from messages_app.text_windows import (
    MCP_TEXT_DEFAULTS,
    TEXT_BOUND_NOTE,
    bounded,
    bounded_all,
    literal_focus,
)

# What the three membership tools add for a run token (runs that cannot be poisoned).
DELIVERABLE_NOTE = (
    " With a run token every message also carries deliverable: false means a reply citing it "
    "would be refused (delivery_blocked), because the conversation you answer may not see it; "
    "avoid reading such messages. A run created with toolScope deliverable is shown only the "
    "messages its conversation may receive, as search_history."
)


class GetMessageArguments(StrictSerializer):
    """get_message's one argument. Over REST the id is the path (``/messages/{id}``)."""

    messageId = Id()


def list_messages(call: ToolCall, arguments: dict[str, Any]) -> dict[str, Any]:
    caller = call.caller
    scope = {
        "workspace_id": caller.workspace_id,
        "agent_id": caller.agent_id,
        "conversation_id": arguments["conversationId"],
        "limit": arguments["limit"],
    }
    if "direction" in arguments:
        page = selectors.message_list_around(
            **scope,
            anchor_id=arguments["anchorId"],
            direction=arguments["direction"],
            lens=call.lens,
        )
    else:
        page = selectors.message_list(
            **scope,
            offset=arguments["offset"],
            before_date=arguments.get("beforeDate"),
            lens=call.lens,
        )
    call.returned(page.items)
    shown = bounded_all(page.items, arguments.get("maxTextLength"))
    return MessagePage.render(page, items=ToolMessageSummary.render_many(shown))


def get_message(call: ToolCall, arguments: dict[str, Any]) -> dict[str, Any]:
    caller = call.caller
    message = selectors.message_get(
        workspace_id=caller.workspace_id,
        agent_id=caller.agent_id,
        message_id=arguments["messageId"],
        lens=call.lens,
    )
    call.returned([message])
    return ToolMessageSummary.render(message)


def search_messages(call: ToolCall, arguments: dict[str, Any]) -> dict[str, Any]:
    """Audited like every search (``audit_app``): the event is written before the answer,
    in the run's transaction when there is a run, and the call fails closed without it."""
    caller = call.caller
    items = selectors.message_search(
        workspace_id=caller.workspace_id,
        agent_id=caller.agent_id,
        query=arguments["query"],
        limit=arguments["limit"],
        conversation_id=arguments.get("conversationId"),
        lens=call.lens,
    )
    audit.lookup_event_record(
        tool=SearchTool.SEARCH_MESSAGES,
        workspace_id=caller.workspace_id,
        agent_id=caller.agent_id,
        run_id=caller.run_id,
        destination_id=call.destination_id,
        requester_id=call.requester_id,
        query_text=arguments["query"],
        filters={
            "conversationId": str(arguments["conversationId"])
            if arguments.get("conversationId")
            else None,
            "limit": arguments["limit"],
        },
        result_ids=[message.id for message in items],
    )
    call.returned(items)
    bound = arguments.get("maxTextLength")
    # The match is looked for only in a text the bound cuts.
    shown = [
        bounded(message, bound, literal_focus(message.content, arguments["query"]))
        if bound is not None and len(message.content) > bound
        else message
        for message in items
    ]
    return MessageSearchResult.render(
        {"items": shown, "total": len(items), "limit": arguments["limit"]}
    )


LIST_MESSAGES = register(
    AgentTool(
        name="list_messages",
        description=(
            "Read one conversation's messages in order, newest first. Use it to page back "
            "through a conversation (limit and offset, optionally only messages before "
            "beforeDate) or to read the exchange around a message whose id you already have "
            "(exactly one of before, after or around). Only conversations this agent is a "
            "current member of can be read, and deleted messages never appear. It does not "
            "search: to find messages by their words use search_messages (exact text) or "
            "search_history (ranked search over everything this run may use)." + DELIVERABLE_NOTE
        ),
        arguments=ListMessagesQuery,
        argument_descriptions={
            "conversationId": "The conversation to read (a UUID).",
            "limit": (
                "How many messages to return, 1 to 200 (default 50). With around: up to "
                "limit/2 on each side of the anchor, plus the anchor."
            ),
            "offset": (
                "Skip this many of the newest messages (default 0, at most 100000). Not "
                "combinable with before, after or around."
            ),
            "beforeDate": (
                "Only messages created before this RFC 3339 time, e.g. 2026-01-02T03:04:05Z. "
                "Not combinable with before, after or around."
            ),
            "before": (
                "A message id: the limit messages just older than it. (A legacy RFC 3339 "
                "time here is read as beforeDate.)"
            ),
            "after": "A message id: the limit messages just newer than it.",
            "around": "A message id: that message with up to limit/2 messages on each side.",
            "maxTextLength": TEXT_BOUND_NOTE,
        },
        permission=IsAgentOrRunToken,
        body=list_messages,
        mcp_defaults=MCP_TEXT_DEFAULTS,
    )
)
GET_MESSAGE = register(
    AgentTool(
        name="get_message",
        description=(
            "Fetch one message by its id (a UUID taken from another tool's result). Answers "
            "not_found both when the message does not exist and when this agent may not read "
            "its conversation. To see the messages around it, use list_messages with around "
            "set to this id." + DELIVERABLE_NOTE
        ),
        arguments=GetMessageArguments,
        argument_descriptions={"messageId": "The message's id (a UUID)."},
        permission=IsAgentOrRunToken,
        body=get_message,
    )
)
SEARCH_MESSAGES = register(
    AgentTool(
        name="search_messages",
        description=(
            "Find messages that contain an exact piece of text: a case-insensitive literal "
            "substring match, newest first, across the conversations this agent is a member of "
            "or inside one conversation. Use it for a phrase, name, number, code or error "
            "string you expect to appear verbatim. It is not semantic search and does not "
            "rank: no word forms, synonyms or paraphrases match, and % and _ are ordinary "
            "characters. To find what was said about a topic, or a decision, use "
            "search_history instead. total counts the items returned, not every match."
            + DELIVERABLE_NOTE
        ),
        arguments=SearchMessagesQuery,
        argument_descriptions={
            "query": (
                "The exact text to look for, 1 to 500 characters (not only spaces), matched "
                "case-insensitively as a substring."
            ),
            "conversationId": (
                "Only search this conversation (a UUID). Omit it to search every conversation "
                "this agent is a member of."
            ),
            "limit": "How many messages to return, 1 to 100 (default 20).",
            "maxTextLength": TEXT_BOUND_NOTE,
        },
        permission=IsAgentOrRunToken,
        body=search_messages,
        mcp_defaults=MCP_TEXT_DEFAULTS,
    )
)
