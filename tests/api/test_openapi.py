"""The OpenAPI description (each view's annotation, formation/openapi.py's envelope) against
the URL conf and the wire contract.

Every route under ``/api/v1/`` is found by walking the URL conf independently of
drf-spectacular, and each of its operations must document a success response, the bearer
scheme and its error statuses as the one envelope with the right code. A new endpoint without
an annotation fails here (and ``make test`` fails on any generator warning).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

import formation.settings as production_settings
from formation.openapi import SchemaView
from formation.tools import TOOLS_BY_NAME, input_schema
from tests.helpers import References

HTTP_METHODS = ("get", "post", "put", "patch", "delete")
CODES = {
    400: {"invalid_arguments"},
    401: {"unauthenticated"},
    403: {"forbidden"},
    404: {"not_found"},
    406: {"not_acceptable"},
    409: {"delivery_blocked", "legal_hold_active"},
    429: {"rate_limited", "search_budget_exhausted"},
    503: {"unavailable", "audit_unavailable"},
}


@pytest.fixture(scope="module")
def schema(tmp_path_factory) -> dict[str, Any]:
    """The schema as ``manage.py spectacular`` writes it; any generator warning fails."""
    target = tmp_path_factory.mktemp("openapi") / "schema.json"
    call_command(
        "spectacular", "--validate", "--fail-on-warn", "--format", "openapi-json", "--file", target
    )
    return json.loads(Path(target).read_text())


def _template(pattern: Any) -> str:
    """A URL pattern as an OpenAPI path template (``<id:pk>`` and ``(?P<pk>…)`` → ``{id}``)."""
    text = str(pattern).removeprefix("^").removesuffix("$")
    text = re.sub(r"\(\?P<(\w+)>[^()]*\)", r"{\1}", text)
    text = re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", text)
    return text.replace("{pk}", "{id}")


def _methods(callback: Any) -> set[str]:
    if hasattr(callback, "actions"):  # a DRF viewset route
        # A viewset adds "head" to its own actions the first time it serves a GET; HEAD is
        # GET without the body and OpenAPI leaves it implied.
        return set(callback.actions) - {"head"}
    view_class = getattr(callback, "cls", None)
    if view_class is None:  # not DRF: drf-spectacular would leave it out of the schema
        return {"(not a DRF view)"}
    return {method for method in HTTP_METHODS if hasattr(view_class, method)}


def api_routes() -> set[tuple[str, str]]:
    """Every (path, method) the URL conf serves under /api/v1/."""
    routes: set[tuple[str, str]] = set()

    def walk(patterns: list[Any], prefix: str) -> None:
        for entry in patterns:
            if isinstance(entry, URLResolver):
                walk(entry.url_patterns, prefix + _template(entry.pattern))
            elif isinstance(entry, URLPattern):
                route = "/" + prefix + _template(entry.pattern)
                if route.startswith("/api/v1/"):
                    routes.update((route, method) for method in _methods(entry.callback))

    walk(get_resolver().url_patterns, "")
    return routes


def operations(schema: dict[str, Any]):
    for route, item in schema["paths"].items():
        for method, operation in item.items():
            yield route, method, operation


def component(schema: dict[str, Any], ref: str) -> dict[str, Any]:
    return schema["components"]["schemas"][ref.rsplit("/", 1)[-1]]


def envelope_codes(schema: dict[str, Any], response: dict[str, Any]) -> set[str]:
    envelope = component(schema, response["content"]["application/json"]["schema"]["$ref"])
    assert envelope["required"] == ["error"]
    body = component(schema, envelope["properties"]["error"]["$ref"])
    assert set(body["properties"]) == {"code", "message", "details"}
    return set(component(schema, body["properties"]["code"]["$ref"])["enum"])


def test_the_walk_finds_the_known_routes():
    routes = api_routes()

    assert ("/api/v1/messages", "get") in routes
    assert ("/api/v1/accounts/{id}", "get") in routes
    assert ("/api/v1/conversations/{id}/members", "post") in routes
    assert ("/api/v1/history/search", "post") in routes


def test_every_api_route_is_in_the_schema(schema):
    documented = {(route, method) for route, method, _ in operations(schema)}

    missing = sorted(api_routes() - documented)

    assert not missing, f"add these to formation/openapi.py: {missing}"


def test_the_schema_describes_only_api_routes(schema):
    assert set(schema["paths"]) == {route for route, _ in api_routes()}


def test_every_operation_documents_success_auth_and_its_errors(schema):
    for route, method, operation in operations(schema):
        where = f"{method.upper()} {route}"
        statuses = {int(status) for status in operation["responses"]}
        assert {200, 201, 204} & statuses, where
        assert 401 in statuses, f"{where} does not document its errors (formation/openapi.py)"
        assert {429, 503} <= statuses, where
        assert operation["security"] == [{"bearerToken": []}], where
        assert operation.get("description"), where
        for status, response in operation["responses"].items():
            if int(status) >= 400:
                assert envelope_codes(schema, response) <= CODES[int(status)], (where, status)
                assert response["description"].startswith("`"), (where, status)


def test_bearer_scheme(schema):
    assert schema["components"]["securitySchemes"] == {
        "bearerToken": {
            "type": "http",
            "scheme": "bearer",
            "description": schema["components"]["securitySchemes"]["bearerToken"]["description"],
        }
    }


@pytest.mark.parametrize(
    ("route", "method", "statuses"),
    [
        ("/api/v1/messages", "get", {200, 400, 401, 403, 404, 429, 503}),
        ("/api/v1/messages/{message_id}", "get", {200, 400, 401, 403, 404, 429, 503}),
        ("/api/v1/messages/search", "get", {200, 400, 401, 403, 404, 429, 503}),
        ("/api/v1/history/search", "post", {200, 400, 401, 403, 429, 503}),
        ("/api/v1/runs/{run_id}/reply", "post", {201, 400, 401, 403, 404, 409, 429, 503}),
        ("/api/v1/accounts", "post", {201, 400, 401, 403, 429, 503}),
        ("/api/v1/messages/{message_id}", "delete", {204, 400, 401, 403, 404, 409, 429, 503}),
        ("/api/v1/accounts/{id}/erase", "post", {200, 400, 401, 403, 404, 409, 429, 503}),
        ("/api/v1/conversations/{id}/export", "get", {200, 400, 401, 403, 404, 406, 429, 503}),
        ("/api/v1/tools", "get", {200, 400, 401, 429, 503}),
    ],
)
def test_statuses_per_endpoint(schema, route, method, statuses):
    assert {int(s) for s in schema["paths"][route][method]["responses"]} == statuses


def test_search_history_documents_its_own_429_and_503(schema):
    responses = schema["paths"]["/api/v1/history/search"]["post"]["responses"]

    assert envelope_codes(schema, responses["429"]) == {"search_budget_exhausted", "rate_limited"}
    assert envelope_codes(schema, responses["503"]) == {"audit_unavailable", "unavailable"}


def test_other_endpoints_answer_only_rate_limited_and_unavailable(schema):
    responses = schema["paths"]["/api/v1/messages"]["get"]["responses"]

    assert envelope_codes(schema, responses["429"]) == {"rate_limited"}
    assert envelope_codes(schema, responses["503"]) == {"unavailable"}


def test_agent_tool_operations_are_named_after_the_tools(schema):
    named = {op["operationId"]: (route, method) for route, method, op in operations(schema)}

    assert named["list_messages"] == ("/api/v1/messages", "get")
    assert named["get_message"] == ("/api/v1/messages/{message_id}", "get")
    assert named["search_messages"] == ("/api/v1/messages/search", "get")
    assert named["search_history"] == ("/api/v1/history/search", "post")


@pytest.mark.parametrize(
    ("tool", "route"),
    [("list_messages", "/api/v1/messages"), ("search_messages", "/api/v1/messages/search")],
)
def test_tool_query_parameters_match_the_tool_schema(schema, tool, route):
    parameters = schema["paths"][route]["get"]["parameters"]
    arguments = input_schema(TOOLS_BY_NAME[tool])

    assert {p["name"] for p in parameters} == set(arguments["properties"])
    assert {p["name"] for p in parameters if p.get("required")} == set(arguments["required"])


def test_request_bodies_refuse_unknown_fields(schema):
    body = schema["paths"]["/api/v1/history/search"]["post"]["requestBody"]
    request = component(schema, body["content"]["application/json"]["schema"]["$ref"])

    assert request["additionalProperties"] is False
    assert set(request["properties"]) == set(
        input_schema(TOOLS_BY_NAME["search_history"])["properties"]
    )


def test_each_method_of_a_shared_route_has_its_own_description(schema):
    members = schema["paths"]["/api/v1/conversations/{id}/members"]

    assert members["get"]["summary"] == "List a conversation's memberships"
    assert members["post"]["summary"] == "Join a conversation"
    assert "requestBody" not in members["get"]


def test_list_filters_are_parameters(schema):
    parameters = schema["paths"]["/api/v1/conversations/{id}/members"]["get"]["parameters"]

    assert {p["name"] for p in parameters} == {
        "id",
        "current",
        "accountId",
        "agentId",
        "limit",
        "offset",
    }


@pytest.mark.parametrize("headers", [{}, {"HTTP_AUTHORIZATION": "Bearer not-a-token"}])
def test_schema_and_docs_are_public(db, client, headers):
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json", **headers)
    docs = client.get("/api/docs/", **headers)

    assert schema.status_code == 200
    assert schema.json()["openapi"].startswith("3.")
    assert docs.status_code == 200
    assert b"/api/schema/" in docs.content


def test_the_docs_page_references_no_other_host_and_serves_its_assets(db, settings, tmp_path):
    """Swagger UI works offline: its CSS, JavaScript and favicon are our own static files,
    collected and served as in production (WhiteNoise, hashed names)."""
    settings.STATIC_ROOT = tmp_path
    settings.STORAGES = production_settings.STORAGES
    settings.WHITENOISE_AUTOREFRESH = False
    call_command("collectstatic", interactive=False, verbosity=0)
    client = Client()
    page = client.get("/api/docs/")
    html = page.content.decode()
    parser = References()
    parser.feed(html)
    assert page.status_code == 200
    assert len(parser.found) == 4  # the stylesheet, the favicon and two scripts
    for reference in parser.found:
        parts = urlsplit(reference)
        assert (parts.scheme, parts.netloc) == ("", ""), reference
        assert reference.startswith("/static/")
        assert client.get(reference).status_code == 200, reference
    assert re.findall(r"https?://", html) == []
    # Swagger UI would otherwise load its badge from validator.swagger.io.
    assert '"validatorUrl": null' in html


def test_the_schema_is_generated_once_per_process(db, client, monkeypatch):
    """``/api/schema/`` needs no token, so it must not cost a schema generation per call."""
    generated = []
    real_generator = SchemaView.generator_class

    class CountingGenerator(real_generator):
        def get_schema(self, *args, **kwargs):
            generated.append(1)
            return super().get_schema(*args, **kwargs)

    monkeypatch.setattr(SchemaView, "generated", None)
    monkeypatch.setattr(SchemaView, "generator_class", CountingGenerator)
    first = client.get("/api/schema/", HTTP_ACCEPT="application/json")
    second = client.get("/api/schema/", HTTP_ACCEPT="application/json")
    assert first.status_code == second.status_code == 200
    assert first.json() == second.json()
    assert "/api/v1/history/search" in first.json()["paths"]
    assert generated == [1]
