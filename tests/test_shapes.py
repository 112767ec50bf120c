"""formation.shapes: a response shape renders from its declaration alone.

The API tests check every body on the wire; these pin the rules the declarations rely on: how
values are read and converted, when an optional field is left out, and that a given value must
name a declared field.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest
from rest_framework import serializers

from formation.shapes import Shape, page_shape

ROOM = uuid.UUID(int=7)
AT = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


class Room(Shape):
    id = serializers.UUIDField()
    createdAt = serializers.DateTimeField(source="created_at")
    externalId = serializers.CharField(source="external_id", allow_null=True)
    senderUserId = serializers.UUIDField(source="sender_id", required=False)
    count = serializers.IntegerField(required=False)


class Outer(Shape):
    room = Room(source="*")
    ownerId = serializers.UUIDField(source="owner.id")
    tags = serializers.ListField(child=serializers.UUIDField())


@dataclass
class RoomRow:
    id: uuid.UUID = ROOM
    created_at: datetime = AT
    external_id: str | None = None
    sender_id: uuid.UUID | None = None
    count: int | None = None


def test_values_are_read_by_source_and_converted_to_json():
    assert Room.render(RoomRow(external_id="x-1", sender_id=ROOM, count=2)) == {
        "id": str(ROOM),
        "createdAt": "2026-01-02T03:04:05Z",
        "externalId": "x-1",
        "senderUserId": str(ROOM),
        "count": 2,
    }


def test_none_is_null_where_allowed_and_leaves_an_optional_field_out():
    assert Room.render(RoomRow()) == {
        "id": str(ROOM),
        "createdAt": "2026-01-02T03:04:05Z",
        "externalId": None,
    }


def test_a_mapping_source_is_read_by_key_and_an_absent_optional_key_is_left_out():
    assert Room.render({"id": ROOM, "created_at": "2026-01-02T03:04:05Z", "external_id": None}) == {
        "id": str(ROOM),
        "createdAt": "2026-01-02T03:04:05Z",
        "externalId": None,
    }
    with pytest.raises(KeyError):
        Room.render({"id": ROOM, "external_id": None})


def test_nested_and_dotted_sources_and_lists_of_ids():
    @dataclass
    class Owner:
        id: uuid.UUID

    @dataclass
    class Row(RoomRow):
        owner: Owner = None
        tags: tuple = ()

    body = Outer.render(Row(owner=Owner(ROOM), tags=(ROOM,)))

    assert body == {
        "room": Room.render(RoomRow()),
        "ownerId": str(ROOM),
        "tags": [str(ROOM)],
    }


def test_given_values_are_taken_as_they_are_and_must_be_declared():
    assert Room.render(RoomRow(), id="already-json", count=3)["id"] == "already-json"
    with pytest.raises(TypeError):
        Room.render(RoomRow(), undeclared=1)


def test_a_page_renders_its_items_through_their_shape():
    page = page_shape("RoomPage", Room)
    body = page.render({"items": [RoomRow()], "total": 1, "limit": 50, "offset": 0})

    assert body == {"items": [Room.render(RoomRow())], "total": 1, "limit": 50, "offset": 0}
    assert Room(RoomRow()).data == Room.render(RoomRow())
