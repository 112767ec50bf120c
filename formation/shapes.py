"""Response shapes, each declared once: a ``Shape`` is a serializer whose fields are both what
the OpenAPI schema documents and what the body is built from.

DRF renders an object field by field through each field's ``get_attribute`` and
``to_representation``, several times slower than building the dict on a 200-item page, which
is why bodies used to be built by hand beside a serializer that only described them. A
``Shape`` compiles its declared fields once into steps (the key, where the value is read, how it
becomes JSON) and renders with those, so the declaration is the only place a key is written.

Rendering a field: a value given to ``render`` by name is taken as it is (already JSON).
Otherwise it is read from ``source`` by the field's ``source=`` (else its name): attributes of
an object (dotted paths follow them, ``"*"`` is the whole object) or keys of a mapping, and
converted: UUIDs become strings, datetimes RFC 3339 in UTC, a nested shape (or a list of them)
renders itself, a list of UUIDs becomes strings, and everything else is already JSON. An absent
value leaves a ``required=False`` field out; ``None`` is null where the field is
``allow_null``, and otherwise also leaves an optional field out (the message summary's one
sender, a page's ``offset`` outside offset mode).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from operator import attrgetter
from typing import Any, ClassVar

from drf_spectacular.utils import extend_schema_serializer
from rest_framework import serializers

from formation.fields import Timestamp, format_timestamp

_ABSENT = object()
_Step = tuple[str, Callable[[Any], Any], Callable[[Any], Any] | None, bool, bool]


def _attribute_reader(source: str) -> Callable[[Any], Any]:
    return (lambda obj: obj) if source == "*" else attrgetter(source)


def _key_reader(source: str) -> Callable[[Mapping], Any]:
    if source == "*":
        return lambda obj: obj
    path = source.split(".")

    def read(obj: Mapping) -> Any:
        for name in path:
            obj = obj.get(name, _ABSENT) if isinstance(obj, Mapping) else getattr(obj, name)
            if obj is _ABSENT:
                break
        return obj

    return read


def _timestamp(value: Any) -> Any:
    return format_timestamp(value) if isinstance(value, datetime) else value


def _writer(field: serializers.Field) -> Callable[[Any], Any] | None:
    """How a value of ``field`` becomes JSON; None when it already is."""
    if isinstance(field, serializers.ListSerializer) and isinstance(field.child, Shape):
        child = field.child
        return lambda items: [child.render(item) for item in items]
    if isinstance(field, Shape):
        return field.render
    if isinstance(field, serializers.UUIDField):
        return str
    if isinstance(field, serializers.DateTimeField | Timestamp):
        return _timestamp
    if isinstance(field, serializers.ListField) and isinstance(field.child, serializers.UUIDField):
        return lambda items: [str(item) for item in items]
    return None


# No docstring: drf-spectacular would describe every shape that has none of its own with it.
class Shape(serializers.Serializer):
    # ``render(source, **given)`` builds the body (see the module docstring); as an ordinary
    # serializer (``Shape(obj).data``, ``many=True``) it renders the same way.

    # Per field: its name, how its value is read, how it becomes JSON (None: it already is),
    # whether it is required and whether it may be null; for object sources and for mappings.
    _steps: ClassVar[dict[bool, tuple[_Step, ...]]]

    @classmethod
    def steps(cls, *, mapping: bool) -> tuple[_Step, ...]:
        if "_steps" not in cls.__dict__:
            fields = cls._declared_fields.items()
            cls._steps = {
                from_mapping: tuple(
                    (
                        name,
                        (_key_reader if from_mapping else _attribute_reader)(field.source or name),
                        _writer(field),
                        field.required,
                        field.allow_null,
                    )
                    for name, field in fields
                )
                for from_mapping in (False, True)
            }
        return cls._steps[mapping]

    @classmethod
    def render(cls, source: Any = None, **given: Any) -> dict[str, Any]:
        """The body for ``source``, with the values in ``given`` (already JSON) by field name.

        An absent value leaves an optional field out and is an error for a required one; a
        ``None`` is null where the field allows it, else it leaves an optional field out.
        """
        if given and not given.keys() <= cls._declared_fields.keys():
            raise TypeError(f"{cls.__name__} has no field {sorted(given - cls._declared_fields)}.")
        body: dict[str, Any] = {}
        for name, read, write, required, nullable in cls.steps(mapping=isinstance(source, Mapping)):
            if given and name in given:
                value = given[name]
                write = None
            else:
                value = _ABSENT if source is None else read(source)
            if value is _ABSENT:
                if required:
                    raise KeyError(f"{cls.__name__}.{name} has no value.")
            elif value is None:
                if nullable or required:
                    body[name] = None
            else:
                body[name] = value if write is None else write(value)
        return body

    @classmethod
    def render_many(cls, sources: Iterable[Any]) -> list[dict[str, Any]]:
        return [cls.render(source) for source in sources]

    def to_representation(self, instance: Any) -> dict[str, Any]:
        return self.render(instance)


def page_shape(name: str, item: type[Shape]) -> type[Shape]:
    """``{items, total, limit, offset}``, the ingestion API's paged lists: one object, not the
    array drf-spectacular would make of a viewset's ``list`` response."""
    page = type(
        name,
        (Shape,),
        {
            "__module__": item.__module__,
            "items": item(many=True),
            "total": serializers.IntegerField(help_text="Matching rows, regardless of paging."),
            "limit": serializers.IntegerField(),
            "offset": serializers.IntegerField(),
        },
    )
    return extend_schema_serializer(many=False)(page)
