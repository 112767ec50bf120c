"""What every app's ``urls.py`` routes ids with: the ``id`` path converter.

Like Django's ``uuid`` converter, but it also accepts upper-case hex, as DRF's router does; a
malformed id matches no route, so it is the same ``not_found`` as an unknown one. Importing
this module registers the converter, so each ``urls.py`` that uses ``<id:...>`` imports it.
"""

import uuid

from django.urls import register_converter

UUID_PATTERN = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"


class AnyCaseUUIDConverter:
    regex = UUID_PATTERN

    def to_python(self, value: str) -> uuid.UUID:
        return uuid.UUID(value)

    def to_url(self, value: uuid.UUID) -> str:
        return str(value)


register_converter(AnyCaseUUIDConverter, "id")
