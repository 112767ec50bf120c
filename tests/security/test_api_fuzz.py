"""Schemathesis against our own OpenAPI schema, in process, on the test database.

Every operation gets generated requests, valid and invalid, sent through the real WSGI stack
with the token kind the operation takes; every response must match the schema (status, content
type, body, headers) and nothing may answer 500. A stateful run then follows the schema's links
(create a conversation, post into it, read it back, open a run, reply...), which random ids alone
would never reach. The bounds keep the whole file to a couple of minutes on two cores.

One built-in check is left out: ``positive_data_acceptance`` expects every schema-valid request
to succeed, but the API has rules OpenAPI 3.0 cannot state (exactly one of two sender fields,
ids that must name rows of the caller's workspace, a link that must be pending to verify, a
query needing one searchable word), and answers them with ``invalid_arguments`` as SPEC §8 says.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import schemathesis
from django.core import signals
from django.db import close_old_connections, transaction
from drf_spectacular.generators import SchemaGenerator
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

from formation.wsgi import application
from messages_app import services
from messages_app.models import Run, TokenKind
from search_app.runs.services import run_create
from tests import factories
from tests.factories import at


def _openapi_document() -> dict:
    """The schema ``/api/schema/`` serves, as plain JSON (lazy strings resolved)."""
    generated = SchemaGenerator().get_schema(request=None, public=True)
    return json.loads(json.dumps(generated, default=str))


schema = schemathesis.openapi.from_dict(_openapi_document())
schema.app = application

# Which token each operation is called with: the one it accepts. An operation missing here
# fails the test, so a new endpoint is fuzzed as its callers would call it.
TOKEN_FOR_OPERATION = {
    "accounts_list": "service",
    "accounts_create": "service",
    "accounts_retrieve": "service",
    "agents_list": "service",
    "agents_create": "service",
    "agents_retrieve": "service",
    "conversations_list": "service",
    "conversations_create": "service",
    "conversations_retrieve": "service",
    "conversations_members_retrieve": "service",
    "conversations_members_create": "service",
    "conversations_members_leave_create": "service",
    "conversations_messages_create": "service",
    "conversations_messages_bulk_create": "service",
    "identity_links_list": "service",
    "identity_links_create": "service",
    "identity_links_retrieve": "service",
    "identity_links_revoke_create": "service",
    "identity_links_verify_create": "service",
    "runs_create": "service",
    "runs_retrieve": "service",
    "message_edit": "service",
    "message_delete": "service",
    "run_trace": "service",
    "retention_retrieve": "service",
    "retention_update": "service",
    "conversation_retention_retrieve": "service",
    "conversation_retention_update": "service",
    "conversation_retention_destroy": "service",
    "conversation_export": "service",
    "account_export": "service",
    "account_erase": "service",
    "legal_holds_list": "service",
    "legal_holds_create": "service",
    "legal_holds_retrieve": "service",
    "legal_holds_release": "service",
    "list_messages": "agent",
    "get_message": "agent",
    "search_messages": "agent",
    "memory_search": "run",
    "tools_list": "agent",
    "search_history": "run",
    "run_reply": "run",
    "memory_create": "run",
}


@dataclass
class FuzzWorld:
    """Real rows for generated requests to land on, and how to mint a token per caller kind.

    Run tokens are minted per request: a reply finishes its run, and later requests of the same
    test should still reach the tool rather than the finished-run refusal.
    """

    workspace_id: uuid.UUID
    agent_id: uuid.UUID
    requester_id: uuid.UUID
    destination_id: uuid.UUID
    tokens: dict[str, str]
    path_ids: dict[str, str]

    def token(self, kind: str, run_id: object = None) -> str:
        """The caller's token; for a run route, the token of the run in its path when that run
        exists here (a link from ``POST /runs``), else of a new run."""
        if kind != "run":
            return self.tokens[kind]
        run = Run.objects.filter(workspace_id=self.workspace_id, pk=_as_uuid(run_id)).first()
        if run is not None:
            return services.token_create(
                workspace_id=self.workspace_id, kind=TokenKind.RUN, run=run
            )[1]
        run, raw = run_create(
            workspace_id=self.workspace_id,
            agent_id=self.agent_id,
            conversation_id=self.destination_id,
            requester_id=self.requester_id,
        )
        self.path_ids["/api/v1/runs/{run_id}"] = str(run.id)
        return raw


def _as_uuid(value: object) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(value))
    except ValueError:
        return None


# The world of the test running now: the auth provider below is registered once per schema.
CURRENT: dict[str, FuzzWorld] = {}


@schema.auth(refresh_interval=None)
class TokenForOperation:
    """The token kind each operation accepts; schemathesis still sends none or a forged one
    when it checks that authentication is enforced."""

    def get(self, case: schemathesis.Case, context: schemathesis.AuthContext) -> str:
        kind = TOKEN_FOR_OPERATION[context.operation.definition.raw["operationId"]]
        if "world" not in CURRENT:
            # Collection asks too, before any test has built its world: no token is valid then.
            return "no-world-yet"
        return CURRENT["world"].token(kind, (case.path_parameters or {}).get("run_id"))

    def set(self, case: schemathesis.Case, data: str, context: schemathesis.AuthContext) -> None:
        case.headers = {**(case.headers or {}), "Authorization": f"Bearer {data}"}


@pytest.fixture
def in_process_connection() -> Iterator[None]:
    """Requests share the test's connection and transaction, as Django's test client arranges:
    the handler's end-of-request clean-up would otherwise close it mid-test."""
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    try:
        yield
    finally:
        signals.request_started.connect(close_old_connections)
        signals.request_finished.connect(close_old_connections)


@pytest.fixture
def fuzz_world(db, in_process_connection) -> Iterator[FuzzWorld]:
    workspace = factories.make_workspace("fuzz")
    agent = factories.make_agent(workspace)
    alice = factories.make_account(workspace, "Alice Example")
    room = factories.make_conversation(workspace, "private", "planning")
    for member in (agent, alice):
        factories.join(room, member, joined_at=at(-60))
    message = factories.post(room, alice, "sample status for the fuzzer", created_at=at(1))
    run, _ = run_create(
        workspace_id=workspace.id,
        agent_id=agent.id,
        conversation_id=room.id,
        requester_id=alice.id,
    )
    link = services.identity_link_create(
        workspace_id=workspace.id,
        account_id=alice.id,
        linked_account_id=factories.make_account(workspace, "Alice Elsewhere").id,
    )
    hold = factories.hold_elsewhere(workspace)
    _, service_token = services.token_create(workspace_id=workspace.id, kind=TokenKind.SERVICE)
    _, agent_token = services.token_create(
        workspace_id=workspace.id, kind=TokenKind.AGENT, agent=agent
    )
    CURRENT["world"] = FuzzWorld(
        workspace_id=workspace.id,
        agent_id=agent.id,
        requester_id=alice.id,
        destination_id=room.id,
        tokens={"service": service_token, "agent": agent_token},
        path_ids={
            "/api/v1/accounts/{id}": str(alice.id),
            "/api/v1/agents/{id}": str(agent.id),
            "/api/v1/conversations/{id}": str(room.id),
            "/api/v1/identity-links/{id}": str(link.id),
            "/api/v1/legal-holds/{id}": str(hold.id),
            "/api/v1/runs/{id}": str(run.id),
            "/api/v1/messages/{message_id}": str(message.id),
            "/api/v1/runs/{run_id}": str(run.id),
        },
    )
    yield CURRENT["world"]
    CURRENT.clear()


def _real_id_for(path: str, world: FuzzWorld) -> str | None:
    """The id of a real row for a templated path (longest matching prefix), if any."""
    for template in sorted(world.path_ids, key=len, reverse=True):
        if path.startswith(template):
            return world.path_ids[template]
    return None


def _aim_at_real_rows(case: schemathesis.Case, world: FuzzWorld) -> None:
    """Half the well-formed ids become ids of real rows, so requests reach past the 404."""
    for name, value in (case.path_parameters or {}).items():
        generated = _as_uuid(value)
        real = _real_id_for(case.operation.path, world)
        if generated is not None and real is not None and generated.int % 2 == 0:
            case.path_parameters[name] = real


def test_every_operation_has_a_caller() -> None:
    operation_ids = {
        result.ok().definition.raw["operationId"] for result in schema.get_all_operations()
    }
    assert operation_ids == set(TOKEN_FOR_OPERATION)


@schema.parametrize()
@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_api_conforms_to_its_schema(case: schemathesis.Case, fuzz_world: FuzzWorld) -> None:
    _aim_at_real_rows(case, fuzz_world)
    case.call_and_validate(excluded_checks=[positive_data_acceptance])


class LinkedWorkflow(schema.as_state_machine()):
    """Sequences along the schema's links, with the same checks as the single calls.

    Each sequence runs in a savepoint undone at its end, so every sequence (and Hypothesis's
    replay of a failing one) starts from the same rows and draws the same way.
    """

    def setup(self) -> None:
        self.sequence = transaction.atomic()
        self.sequence.__enter__()

    def teardown(self) -> None:
        transaction.set_rollback(True)
        self.sequence.__exit__(None, None, None)

    def validate_response(self, response, case, additional_checks=None, **kwargs) -> None:
        case.validate_response(
            response,
            additional_checks=additional_checks,
            excluded_checks=[positive_data_acceptance],
            transport_kwargs=kwargs or None,
        )


def test_api_holds_up_along_its_links(fuzz_world: FuzzWorld) -> None:
    """Create a conversation and post into it, then read, edit and delete the message; open a
    run, then reply, remember and read its trace: ids come from the previous answers."""
    LinkedWorkflow.run(
        settings=settings(
            max_examples=40,
            stateful_step_count=6,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
    )
