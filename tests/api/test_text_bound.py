"""Answers that fit a model's context: ``maxTextLength`` on search_history, list_messages and
search_messages cuts each text to a window, marked with ``cut`` (docs/api.md, "Long texts").

Over REST texts stay whole unless the argument is given (SPEC §5 as it was); over MCP the tools
apply ``MCP_TEXT_BOUND`` and answer the body once, as JSON text. All text is synthetic.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx2
import pytest

from formation.tools import TOOLS_BY_NAME
from messages_app import services
from messages_app.models import TokenKind
from messages_app.text_windows import (
    MCP_TEXT_BOUND,
    TextCut,
    literal_focus,
    spans_in_window,
    text_window,
)
from search_app.runs.services import run_create
from tests import factories

pytestmark = pytest.mark.django_db

LONG = 90_000
NEEDLE = "zanzibarquux"


def filler(length: int, seed: str = "lorem") -> str:
    """``length`` characters of plain words that match no test query."""
    words = f"{seed} ipsum dolor sit amet "
    return (words * (length // len(words) + 1))[:length]


def long_with_needle(length: int, at: int) -> str:
    text = filler(length)
    return text[:at] + f" {NEEDLE} " + text[at + len(NEEDLE) + 2 :]


@pytest.fixture
def room(db):
    return factories.joined_room(factories.make_workspace("bound"), "Alice Example", "Bob Ex")


def run_client(room):
    _, client = factories.make_run(room.agent, room, room.people[0])
    return client


def history(client, **body: Any) -> dict[str, Any]:
    response = client.post("/api/v1/history/search", {"query": NEEDLE, **body}, format="json")
    assert response.status_code == 200, response.content
    return response.json()


def words_at(text: str, spans: list[list[int]]) -> list[str]:
    return [text[start : start + length] for start, length in spans]


# --- the window --------------------------------------------------------------------------------


def test_a_text_that_fits_is_whole():
    assert text_window("short", 100) == ("short", None)
    assert text_window("x" * 100, 100) == ("x" * 100, None)


def test_a_window_without_focus_is_the_start():
    text = filler(1_000)
    assert text_window(text, 100) == (text[:100], TextCut(start=0, end=100, length=1_000))


def test_a_window_holds_its_focus_with_a_quarter_before_it():
    text = long_with_needle(1_000, 500)
    focus = literal_focus(text, NEEDLE.upper())
    window, cut = text_window(text, 200, focus)
    assert cut == TextCut(start=focus[0] - 50, end=focus[0] + 150, length=1_000)
    assert window == text[cut.start : cut.end]
    assert window[50:62] == NEEDLE


def test_a_window_near_an_edge_stays_inside_the_text():
    text = long_with_needle(1_000, 980)
    window, cut = text_window(text, 200, literal_focus(text, NEEDLE))
    assert (cut.start, cut.end) == (800, 1_000)
    assert NEEDLE in window
    _, cut = text_window(long_with_needle(1_000, 3), 200, (4, 12))
    assert cut.start == 0


def test_a_focus_longer_than_the_window_starts_at_the_focus():
    _, cut = text_window(filler(1_000), 100, (400, 300))
    assert (cut.start, cut.end) == (400, 500)


def test_highlights_move_into_the_window_and_are_clipped_at_its_edges():
    cut = TextCut(start=100, end=200, length=1_000)
    assert spans_in_window([[50, 10], [95, 10], [120, 5], [195, 10], [300, 4]], cut) == [
        [0, 5],
        [20, 5],
        [95, 5],
    ]
    assert spans_in_window([[1, 2]], None) == [[1, 2]]


# --- REST --------------------------------------------------------------------------------------


def test_rest_search_history_cuts_a_long_hit_around_its_match(room):
    text = long_with_needle(LONG, 60_000)
    message = factories.post(room, room.people[1], text)

    body = history(run_client(room), maxTextLength=1_000)

    (hit,) = body["items"]
    assert hit["id"] == str(message.id)
    assert len(hit["content"]) == len(hit["text"]) == 1_000
    assert hit["content"] == hit["text"]
    cut = hit["cut"]
    assert cut["length"] == LONG
    assert cut["end"] - cut["start"] == 1_000
    assert hit["content"] == text[cut["start"] : cut["end"]]
    assert words_at(hit["text"], hit["highlights"]) == [NEEDLE]


def test_rest_search_history_cuts_long_neighbours_from_their_start(room):
    before = factories.post(room, room.people[1], filler(LONG, "alpha"))
    factories.post(room, room.people[0], f"short {NEEDLE} hit")
    after = factories.post(room, room.people[1], filler(LONG, "omega"))

    body = history(run_client(room), maxTextLength=500)

    (hit,) = body["items"]
    assert "cut" not in hit
    [shown_before] = [m for m in hit["before"] if m["id"] == str(before.id)]
    [shown_after] = [m for m in hit["after"] if m["id"] == str(after.id)]
    for shown, original in ((shown_before, before), (shown_after, after)):
        assert shown["content"] == original.content[:500]
        assert shown["cut"] == {"start": 0, "end": 500, "length": LONG}


def test_rest_search_history_without_the_argument_answers_whole_texts(room):
    text = long_with_needle(LONG, 100)
    factories.post(room, room.people[1], text)

    (hit,) = history(run_client(room))["items"]

    assert hit["content"] == hit["text"] == text
    assert "cut" not in hit


def test_the_budget_counts_messages_as_before(room):
    for minute in range(3):
        factories.post(room, room.people[1], long_with_needle(5_000, 100 * minute))
    whole = history(run_client(room))
    cut = history(run_client(room), maxTextLength=100)
    assert cut["budget"] == whole["budget"]
    assert [hit["id"] for hit in cut["items"]] == [hit["id"] for hit in whole["items"]]


def test_rest_list_and_search_messages_take_the_bound(room):
    long = factories.post(room, room.people[1], long_with_needle(LONG, 45_000))
    short = factories.post(room, room.people[1], f"short {NEEDLE}")
    client = run_client(room)

    page = client.get(
        "/api/v1/messages", {"conversationId": str(room.id), "maxTextLength": 300}
    ).json()
    by_id = {item["id"]: item for item in page["items"]}
    assert by_id[str(long.id)]["content"] == long.content[:300]
    assert by_id[str(long.id)]["cut"] == {"start": 0, "end": 300, "length": LONG}
    assert by_id[str(short.id)]["content"] == short.content
    assert "cut" not in by_id[str(short.id)]

    found = client.get("/api/v1/messages/search", {"query": NEEDLE, "maxTextLength": 300}).json()
    shown = {item["id"]: item for item in found["items"]}[str(long.id)]
    assert NEEDLE in shown["content"]
    assert len(shown["content"]) == 300
    assert shown["content"] == long.content[shown["cut"]["start"] : shown["cut"]["end"]]

    whole = client.get("/api/v1/messages", {"conversationId": str(room.id)}).json()
    assert {item["id"]: item["content"] for item in whole["items"]}[str(long.id)] == long.content


@pytest.mark.parametrize("value", [99, 100_001, 0, -5, "300", True, 2.5])
def test_a_bad_bound_is_invalid_arguments(room, value):
    client = run_client(room)
    response = client.post(
        "/api/v1/history/search", {"query": NEEDLE, "maxTextLength": value}, format="json"
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_arguments"
    assert "maxTextLength" in response.json()["error"]["details"]["fields"]


@pytest.mark.parametrize("value", ["99", "100001", "abc", ""])
def test_a_bad_bound_in_a_query_string_is_invalid_arguments(room, value):
    response = run_client(room).get(
        "/api/v1/messages", {"conversationId": str(room.id), "maxTextLength": value}
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_arguments"


def test_the_answer_grows_with_the_bound_not_with_the_messages(db):
    """20 hits with their neighbours: over 90,000-character messages the answer is at most
    1.5 times the same answer over messages as long as the bound."""
    bound = 1_000
    sizes = {}
    for length in (bound, LONG):
        room = factories.joined_room(
            factories.make_workspace(f"grow-{length}"), "Alice Example", "Bob Ex"
        )
        for turn in range(20):
            factories.post(room, room.people[1], filler(length, f"before{turn}"))
            factories.post(room, room.people[0], long_with_needle(length, length // 2))
            factories.post(room, room.people[1], filler(length, f"after{turn}"))
        body = history(run_client(room), limit=20, maxTextLength=bound)
        assert len(body["items"]) == 20
        assert all(hit["before"] and hit["after"] for hit in body["items"])
        sizes[length] = len(json.dumps(body).encode())
    assert sizes[LONG] <= 1.5 * sizes[bound]


# --- MCP ---------------------------------------------------------------------------------------


def mcp_call(token: str, tool: str, arguments: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """One tools/call over the ASGI app: the raw JSON-RPC answer's size and its result."""
    from formation.asgi import application

    async def call() -> httpx2.Response:
        async with httpx2.AsyncClient(
            transport=httpx2.ASGITransport(app=application), base_url="http://localhost"
        ) as client:
            return await client.post(
                "/mcp",
                json={
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "tools/call",
                    "params": {"name": tool, "arguments": arguments},
                },
                headers={
                    "Authorization": f"Bearer {token}",
                    "Accept": "application/json, text/event-stream",
                },
            )

    response = anyio.run(call)
    assert response.status_code == 200, response.content
    return len(response.content), response.json()["result"]


def mcp_body(result: dict[str, Any]) -> dict[str, Any]:
    assert "structuredContent" not in result
    (block,) = result["content"]
    return json.loads(block["text"])


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("where", ["hit", "neighbours"])
def test_mcp_search_history_with_default_arguments_fits_in_64_kib(where):
    room = factories.joined_room(factories.make_workspace(f"mcp-{where}"), "Alice Ex", "Bob Ex")
    for turn in range(8):
        if where == "hit":
            factories.post(room, room.people[0], long_with_needle(LONG, 1_000 * turn))
        else:
            factories.post(room, room.people[1], filler(LONG, f"before{turn}"))
            factories.post(room, room.people[0], f"short {NEEDLE} number {turn}")
            factories.post(room, room.people[1], filler(LONG, f"after{turn}"))
    _, token = run_create(
        workspace_id=room.workspace_id,
        agent_id=room.agent.id,
        conversation_id=room.id,
        requester_id=room.people[0].id,
    )

    size, result = mcp_call(token, "search_history", {"query": NEEDLE})

    assert size <= 64 * 1024
    body = mcp_body(result)
    assert len(body["items"]) == 8
    texts = [hit["content"] for hit in body["items"]] + [
        neighbour["content"]
        for hit in body["items"]
        for neighbour in (*hit["before"], *hit["after"])
    ]
    assert all(len(text) <= MCP_TEXT_BOUND for text in texts)
    if where == "hit":
        assert all(NEEDLE in hit["text"] for hit in body["items"])
        assert all(hit["cut"]["length"] == LONG for hit in body["items"])


@pytest.mark.django_db(transaction=True)
def test_mcp_list_and_search_messages_apply_the_default_bound_and_take_another():
    room = factories.joined_room(factories.make_workspace("mcp-list"), "Alice Ex", "Bob Ex")
    long = factories.post(room, room.people[1], long_with_needle(LONG, 80_000))
    _, token = services.token_create(
        workspace_id=room.workspace_id, kind=TokenKind.AGENT, agent=room.agent
    )

    _, listed = mcp_call(token, "list_messages", {"conversationId": str(room.id)})
    (item,) = mcp_body(listed)["items"]
    assert item["content"] == long.content[:MCP_TEXT_BOUND]
    assert item["cut"] == {"start": 0, "end": MCP_TEXT_BOUND, "length": LONG}

    _, found = mcp_call(token, "search_messages", {"query": NEEDLE, "maxTextLength": 2_000})
    (item,) = mcp_body(found)["items"]
    assert NEEDLE in item["content"]
    assert len(item["content"]) == 2_000

    _, whole = mcp_call(token, "get_message", {"messageId": str(long.id)})
    assert mcp_body(whole)["content"] == long.content


def test_the_tools_describe_the_bound_and_its_mcp_default():
    for name in ("search_history", "list_messages", "search_messages"):
        tool = TOOLS_BY_NAME[name]
        assert tool.mcp_defaults == {"maxTextLength": MCP_TEXT_BOUND}
        assert (
            f"Over MCP the default is {MCP_TEXT_BOUND}"
            in tool.argument_descriptions["maxTextLength"]
        )
    assert TOOLS_BY_NAME["get_message"].mcp_defaults == {}
