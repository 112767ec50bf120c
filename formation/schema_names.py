"""The OpenAPI schema class of every view (``DEFAULT_SCHEMA_CLASS``), in a module of its own:
DRF imports it while the views' modules load, so it imports nothing of the project."""

from __future__ import annotations

from typing import Any

from drf_spectacular.openapi import AutoSchema
from rest_framework import serializers

ROLE_SUFFIXES = ("Shape", "Input")


class ComponentNames(AutoSchema):
    """Names a serializer's component after what it describes, without the suffix that tells a
    reader its direction in the code (``AccountShape``, an answer; ``AccountCreateInput``, a
    request body): the components are ``Account`` and ``AccountCreateRequest``."""

    def get_serializer_name(self, serializer: serializers.Serializer, direction: Any) -> str:
        name = serializer.__class__.__name__
        for suffix in ROLE_SUFFIXES:
            if name.endswith(suffix) and name != suffix:
                return name.removesuffix(suffix)
        return name
