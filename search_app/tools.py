"""search_history: its definition and body, registered into ``formation.tools`` when this app
is ready; and, as the owner of runs, how a run token's call of any other tool holds its run
(``runs.services.tool_call``)."""

from __future__ import annotations

from typing import Any

from formation.auth import IsRunToken
from formation.tools import AgentTool, ToolCall, hold_runs_with, register
from messages_app.text_windows import MCP_TEXT_DEFAULTS, TEXT_BOUND_NOTE
from search_app import services
from search_app.limits import DEFAULT_HITS, EVIDENCE_BUDGET, MAX_HITS
from search_app.runs.services import tool_call
from search_app.serializers import SearchHistoryInput, history_filters, search_history_body

# search_history's query syntax (SPEC §6), for its description here and in the OpenAPI schema.
QUERY_SYNTAX = (
    "Query syntax: words are alternatives (any of them may match); a group in double quotes is "
    'one alternative that matches only where its words stand adjacent and in order ("release '
    'train"); a word of at least two letters or digits ending in * matches by prefix (deploy* '
    "finds deployment); every other character is plain text, and a quote without a partner is "
    "an ordinary character. Chinese, Japanese and Korean text is found by any word of two or "
    "more characters, also inside a sentence written without spaces."
)


def search_history(call: ToolCall, arguments: dict[str, Any]) -> dict[str, Any]:
    """Run a validated search_history call for a run token and answer SPEC §5's body."""
    result = services.search_history(
        workspace_id=call.caller.workspace_id,
        run_id=call.caller.run_id,
        query_text=arguments["query"],
        filters=history_filters(arguments),
        limit=arguments.get("limit") or DEFAULT_HITS,
        run=call.caller.run,
        agent_id=call.caller.agent_id,
    )
    call.counts.update(hits=len(result.hits), neighbours=services.neighbour_count(result.hits))
    return search_history_body(result, text_bound=arguments.get("maxTextLength"))


SEARCH_HISTORY = register(
    AgentTool(
        name="search_history",
        description=(
            "Search the past conversations this run may draw on, ranked by relevance, to "
            "answer questions such as 'what did we decide about the migration last month?'. "
            "Words match in any grammatical form (migrate, migrating, migration) and any of "
            "the query's words may match; hits with more, rarer and closer words rank higher, "
            "helped by who spoke, where and how recently. Each hit carries its conversation, "
            "speaker, time, text, the reasons for its rank and up to two messages on each side "
            "for context. Only messages that the current conversation's audience may receive "
            "are returned, and the run's current message and recent history are left out "
            "because you already have them. It is lexical full-text search, not semantic: "
            "synonyms and paraphrases do not match, so use the words people would have "
            "written; for an exact code or error string use search_messages. Needs a run "
            f"token. A run may bring in at most {EVIDENCE_BUDGET} distinct messages through "
            f"this tool; after that it answers search_budget_exhausted. {QUERY_SYNTAX}"
        ),
        arguments=SearchHistoryInput,
        argument_descriptions={
            "query": (
                "Words to look for, at most 500 characters and 24 distinct words, phrases or "
                'prefixes: "quoted words" must be adjacent and in order, word* matches by '
                "prefix. Common words such as 'the' are ignored, so a query of only those is "
                "invalid."
            ),
            "speaker": (
                "Whose messages count as hits: anyone (the default), requester (the person "
                "being answered, including their linked accounts) or you (this agent)."
            ),
            "after": "Only hits created after this RFC 3339 time, e.g. 2026-01-02T03:04:05Z.",
            "before": "Only hits created before this RFC 3339 time.",
            "limit": (
                f"How many hits to return, 1 to {MAX_HITS} (default {DEFAULT_HITS}). Each hit "
                "also brings up to four neighbouring messages."
            ),
            "maxTextLength": TEXT_BOUND_NOTE,
        },
        permission=IsRunToken,
        body=search_history,
        read_only=False,
        # Exclusively, with the scope in the same statement, to spend the run's budget.
        locks_run_itself=True,
        mcp_defaults=MCP_TEXT_DEFAULTS,
    )
)

hold_runs_with(tool_call)
