"""The corpus's generation steps without a database: the rows a seed gives are pinned.

Every step draws from one random stream, so a refactor that draws the same numbers in another
order changes the corpus; the pinned digests (of the rows before the package was split) catch it.
"""

from __future__ import annotations

import hashlib
import random

from synthetic.corpus import BUSY_AGENT_NAME, corpus_vocabulary
from synthetic.corpus.messages import Part, message_chunks
from synthetic.corpus.plan import plan_world

SEED = 7
WORLD_DIGEST = "2d03a1bd70554b8b473c1506e89e6843b1202bec9c0500639961cf7d360c4eb6"
CORPUS_DIGEST = "178b6ce2f10691f3998494031a3828d6d3aa9bd4d468ac4f06c47e8ef6b5eb1d"


def planned(seed: int = SEED):
    vocabulary = corpus_vocabulary(seed)
    rng = random.Random(f"formation-corpus:{seed}")
    world = plan_world(rng, seed=seed, workspaces=2, conversations=48, vocabulary=vocabulary)
    return rng, world, vocabulary


def test_the_world_and_messages_of_a_seed_are_the_pinned_rows():
    rng, world, vocabulary = planned()
    digest = hashlib.sha256()
    for _, _, rows in world.tables:
        digest.update("".join(rows).encode())
    assert digest.hexdigest() == WORLD_DIGEST
    for chunk in message_chunks(rng, world, vocabulary, total=3_000, sizes=[1_000] * 3):
        for part in chunk.parts:
            digest.update("".join(part.messages).encode())
            digest.update("".join(part.lineage).encode())
    assert digest.hexdigest() == CORPUS_DIGEST


def test_the_plan_counts_its_rows_and_puts_the_busy_agent_in_workspace_zero():
    _, world, _ = planned()
    assert list(world.counts.values()) == [len(rows) for _, _, rows in world.tables]
    assert world.counts["workspaces"] == len(world.workspace_ids) == 2
    assert world.counts["conversations"] == len(world.rooms) == 48
    agents = [row.split("\t") for row in world.tables[2][2]]
    busy = [agent_id for agent_id, workspace_id, name, _ in agents if name == BUSY_AGENT_NAME]
    assert busy == [world.busy_agent_id]
    assert world.rooms[0].agents[0].member_id == world.busy_agent_id


def test_parts_merge_in_workspace_order():
    first = Part(messages=["a\n"], lineage=["x\n"], counters={"r1": [1, 1, 1]}, deleted=1)
    second = Part(messages=["b\n"], counters={"r2": [2, 1, 5]})
    merged = Part.merge([first, second])
    assert merged == Part(
        messages=["a\n", "b\n"],
        lineage=["x\n"],
        counters={"r1": [1, 1, 1], "r2": [2, 1, 5]},
        deleted=1,
    )
