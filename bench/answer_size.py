"""How many bytes a search_history answer takes when its hits or neighbours are long messages,
over REST and over MCP (docs/mcp.md, "Long texts").

    DATABASE_URL=postgresql://…/formation_answer_size .venv/bin/python bench/answer_size.py \
        [--long 90000]

Migrates the named database (it writes to it: name one of its own), loads synthetic rooms and
calls the tools as a run token would, through ``formation.tools.call_tool`` (what REST answers)
and through the MCP server's result and JSON-RPC envelope (what ``/mcp`` answers). Runs on code
without ``maxTextLength`` too (it prints "n/a" for what that code cannot do), for a before and
after. ``--long`` is the length of a long message (the smoke test's is a few thousand).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.django_setup import setup_django  # noqa: E402

LONG = 90_000
# The maxTextLength the long messages are compared with.
BOUND = 1_000
NEEDLE = "zanzibarquux"


def filler(length: int, seed: str) -> str:
    words = f"{seed} ipsum dolor sit amet "
    return (words * (length // len(words) + 1))[:length]


def with_needle(length: int, at: int) -> str:
    text = filler(length, "lorem")
    return text[:at] + f" {NEEDLE} " + text[at + len(NEEDLE) + 2 :]


def room_with(slug: str, turns: list[tuple[int, str]]):
    """A private room of a new workspace where an agent and two people joined early, holding
    ``turns`` (speaker index, text) in order; a run token for the agent there."""
    from datetime import UTC, datetime

    from messages_app import services
    from search_app.runs.services import run_create

    early = datetime(2020, 1, 1, tzinfo=UTC)
    workspace = services.workspace_create(slug=slug)
    agent = services.agent_create(workspace_id=workspace.id, name="Bench agent")
    people = [
        services.account_create(workspace_id=workspace.id, display_name=name)
        for name in ("Alice Bench", "Bob Bench")
    ]
    room = services.conversation_create(workspace_id=workspace.id, kind="private", title=slug)
    services.membership_join(conversation=room, agent_id=agent.id, joined_at=early)
    for person in people:
        services.membership_join(conversation=room, account_id=person.id, joined_at=early)
    for speaker, text in turns:
        services.message_create(
            conversation=room,
            draft=services.MessageDraft(content=text, sender_account_id=people[speaker].id),
        )
    _, token = run_create(
        workspace_id=workspace.id,
        agent_id=agent.id,
        conversation_id=room.id,
        requester_id=people[0].id,
    )
    return token


def rest_bytes(token: str, arguments: dict[str, Any]) -> int | None:
    from rest_framework.exceptions import ValidationError

    from formation.tools import call_tool, caller_for_token

    try:
        body = call_tool(caller=caller_for_token(token), name="search_history", arguments=arguments)
    except ValidationError:
        return None  # code without the argument
    return len(json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode())


def mcp_bytes(token: str, arguments: dict[str, Any]) -> int:
    from mcp import types

    from formation import mcp_server, tools

    defaults = getattr(tools, "with_mcp_defaults", lambda name, given: dict(given))
    body = tools.call_tool(
        caller=tools.caller_for_token(token),
        name="search_history",
        arguments=defaults("search_history", arguments),
    )
    result = mcp_server._result(body)
    envelope = types.JSONRPCResponse(
        jsonrpc="2.0", id=1, result=result.model_dump(by_alias=True, exclude_none=True)
    )
    return len(envelope.model_dump_json(by_alias=True, exclude_none=True).encode())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--long",
        type=int,
        default=LONG,
        help=f"characters of a long message (default {LONG:,}; more than {BOUND:,})",
    )
    long = parser.parse_args().long
    if long <= BOUND:
        parser.error(f"--long must be more than {BOUND:,}")
    setup_django("Set DATABASE_URL to a database of this benchmark's own.")
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from uuid import uuid4

    tag = uuid4().hex[:6]
    one_long_hit = room_with(f"long-hit-{tag}", [(1, with_needle(long, long // 2))])
    long_neighbours = room_with(
        f"long-neighbours-{tag}",
        [(1, filler(long, "before")), (0, f"short {NEEDLE}"), (1, filler(long, "after"))],
    )
    eight_long_hits = room_with(
        f"eight-long-{tag}", [(1, with_needle(long, long // 18 * turn)) for turn in range(8)]
    )
    eight_between_long = room_with(
        f"eight-between-{tag}",
        [
            turn
            for number in range(8)
            for turn in (
                (1, filler(long, f"before{number}")),
                (0, f"short {NEEDLE} {number}"),
                (1, filler(long, f"after{number}")),
            )
        ],
    )

    def twenty(length: int) -> str:
        return room_with(
            f"twenty-{length}-{tag}",
            [
                turn
                for number in range(20)
                for turn in (
                    (1, filler(length, f"before{number}")),
                    (0, with_needle(length, length // 2)),
                    (1, filler(length, f"after{number}")),
                )
            ],
        )

    twenty_long, twenty_bound = twenty(long), twenty(BOUND)
    query = {"query": NEEDLE}
    chars = f"{long:,}"
    rows = [
        (f"REST, one hit of {chars} characters", rest_bytes(one_long_hit, query)),
        (
            f"REST, one short hit beside {chars}-character neighbours",
            rest_bytes(long_neighbours, query),
        ),
        (f"MCP, one hit of {chars} characters", mcp_bytes(one_long_hit, query)),
        (
            f"MCP, one short hit between {chars}-character neighbours",
            mcp_bytes(long_neighbours, query),
        ),
        (f"MCP, 8 hits of {chars} characters", mcp_bytes(eight_long_hits, query)),
        (
            f"MCP, 8 short hits between {chars}-character neighbours",
            mcp_bytes(eight_between_long, query),
        ),
    ]
    bounded = {"query": NEEDLE, "limit": 20, "maxTextLength": BOUND}
    over_long, over_bound = rest_bytes(twenty_long, bounded), rest_bytes(twenty_bound, bounded)
    rows += [
        (f"REST maxTextLength {BOUND}, 20 hits + neighbours of {chars} characters", over_long),
        (f"REST maxTextLength {BOUND}, 20 hits + neighbours of {BOUND:,} characters", over_bound),
    ]
    print("| answer | bytes |\n|---|--:|")
    for name, size in rows:
        print(f"| {name} | {'n/a' if size is None else f'{size:,}'} |")
    if over_long and over_bound:
        print(
            f"\nratio, {chars}-character messages over bound-long ones: "
            f"{over_long / over_bound:.3f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
