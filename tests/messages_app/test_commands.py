"""Set-up commands (SPEC §8): each prints the new id or token as its last line; bad input is a
CommandError, never a traceback."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from audit_app.models import LifecycleAction, LifecycleEvent, LifecycleOutcome
from messages_app.lifecycle.retention import workspace_retention_set
from messages_app.models import Agent, ApiToken, Message, Run, Workspace
from tests import factories
from tests.helpers import exported


def run(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def last_line(output: str) -> str:
    return output.strip().splitlines()[-1]


# --- create_workspace ----------------------------------------------------------------------


def test_create_workspace_prints_its_id_last(db):
    output = run("create_workspace", "demo-x")
    workspace_id = uuid.UUID(last_line(output))
    workspace = Workspace.objects.get(pk=workspace_id)
    assert workspace.slug == "demo-x"


def test_create_workspace_takes_a_display_name(db):
    workspace_id = uuid.UUID(last_line(run("create_workspace", "demo-named", "--name", "Demo")))
    assert Workspace.objects.get(pk=workspace_id).name == "Demo"


def test_create_workspace_refuses_a_duplicate_slug(db):
    run("create_workspace", "demo-x")
    with pytest.raises(CommandError):
        run("create_workspace", "demo-x")
    assert Workspace.objects.filter(slug="demo-x").count() == 1


@pytest.mark.parametrize("slug", ["", "has space", "bad/slug", "dots.too", "x" * 65, "ünï"])
def test_create_workspace_refuses_a_bad_slug(db, slug):
    with pytest.raises(CommandError):
        run("create_workspace", slug)
    assert not Workspace.objects.exists()


# --- create_agent --------------------------------------------------------------------------


def test_create_agent_prints_the_id_create_token_takes(db):
    """A new workspace had no way to an agent id but POST /api/v1/agents (docs/api.md)."""
    run("create_workspace", "demo-x")
    agent_id = last_line(run("create_agent", "--workspace", "demo-x", "Helper"))

    agent = Agent.objects.get(pk=uuid.UUID(agent_id))
    assert (agent.workspace.slug, agent.name) == ("demo-x", "Helper")
    raw = last_line(run("create_token", "--workspace", "demo-x", "--agent", agent_id))
    assert stored(raw).agent == agent


@pytest.mark.parametrize(
    "args",
    [
        ("--workspace", "nowhere", "Helper"),
        ("--workspace", "demo-x", " "),
        ("--workspace", "demo-x", "x" * 201),
    ],
)
def test_create_agent_refuses_bad_arguments(db, args):
    run("create_workspace", "demo-x")
    with pytest.raises(CommandError):
        run("create_agent", *args)
    assert not Agent.objects.exists()


# --- create_token --------------------------------------------------------------------------


@pytest.fixture
def demo(db) -> Workspace:
    return Workspace.objects.get(pk=uuid.UUID(last_line(run("create_workspace", "demo-x"))))


def stored(raw: str) -> ApiToken:
    return ApiToken.objects.get(digest=hashlib.sha256(raw.encode()).hexdigest())


def test_create_token_service_prints_a_working_token(demo):
    raw = last_line(run("create_token", "--workspace", "demo-x", "--service"))
    token = stored(raw)
    assert (token.kind, token.workspace_id, token.agent_id) == ("service", demo.id, None)
    response = factories.bearer_client(raw).get("/api/v1/accounts")
    assert response.status_code == 200
    assert response.json()["items"] == []


def test_create_token_agent_prints_a_token_acting_as_the_agent(demo):
    agent = factories.make_agent(demo)
    raw = last_line(run("create_token", "--workspace", "demo-x", "--agent", str(agent.id)))
    token = stored(raw)
    assert (token.kind, token.workspace_id, token.agent_id) == ("agent", demo.id, agent.id)
    client = factories.bearer_client(raw)
    assert client.get("/api/v1/messages/search", {"query": "sample"}).status_code == 200
    # An agent token is not a service token.
    assert client.get("/api/v1/accounts").status_code == 403


def test_create_token_refuses_an_unknown_agent(demo):
    with pytest.raises(CommandError):
        run("create_token", "--workspace", "demo-x", "--agent", str(uuid.uuid4()))
    assert not ApiToken.objects.exists()


def test_create_token_refuses_an_agent_of_another_workspace(demo):
    other = factories.make_workspace("demo-other")
    stranger = factories.make_agent(other)
    with pytest.raises(CommandError):
        run("create_token", "--workspace", "demo-x", "--agent", str(stranger.id))
    assert not ApiToken.objects.exists()


@pytest.mark.parametrize("agent_id", ["not-a-uuid", "12345", ""])
def test_create_token_refuses_a_non_uuid_agent(demo, agent_id):
    with pytest.raises(CommandError):
        run("create_token", "--workspace", "demo-x", "--agent", agent_id)
    assert not ApiToken.objects.exists()


def test_create_token_refuses_an_unknown_workspace(demo):
    with pytest.raises(CommandError):
        run("create_token", "--workspace", "no-such-space", "--service")
    assert not ApiToken.objects.exists()


@pytest.mark.parametrize(
    "args",
    [
        ("--workspace", "demo-x"),
        ("--workspace", "demo-x", "--service", "--agent", "00000000-0000-0000-0000-000000000000"),
        ("--service",),
    ],
    ids=["no-kind", "both-kinds", "no-workspace"],
)
def test_create_token_needs_a_workspace_and_exactly_one_kind(demo, args):
    with pytest.raises(CommandError):
        run("create_token", *args)
    assert not ApiToken.objects.exists()


def test_load_demo_refuses_without_debug(settings):
    settings.DEBUG = False
    with pytest.raises(CommandError, match="DEBUG=1"):
        call_command("load_demo", stdout=io.StringIO())


def load_demo(*args: str) -> str:
    out = io.StringIO()
    call_command("load_demo", *args, stdout=out)
    return out.getvalue()


@pytest.mark.django_db
def test_load_demo_prints_export_lines_a_shell_can_paste(settings):
    settings.DEBUG = True
    values = exported(load_demo("--base-url", "http://127.0.0.1:8001/"))
    assert values["FORMATION_URL"] == "http://127.0.0.1:8001"
    assert values["SERVICE_TOKEN"].startswith("fmn_service_")
    assert values["AGENT_TOKEN"].startswith("fmn_agent_")
    assert values["RUN_TOKEN"].startswith("fmn_run_")
    run = Run.objects.get(pk=values["RUN_ID"])
    assert str(run.agent_id) == values["AGENT_ID"]


@pytest.mark.django_db
def test_load_demo_without_base_url_keeps_the_pasted_formation_url(settings, monkeypatch):
    """It printed port 8000 whatever port served; the earlier lines, once pasted, name it."""
    settings.DEBUG = True
    monkeypatch.setenv("FORMATION_URL", "http://127.0.0.1:8123")
    output = load_demo()
    assert exported(output)["FORMATION_URL"] == "http://127.0.0.1:8123"
    assert "at http://127.0.0.1:8123/admin/" in output
    monkeypatch.delenv("FORMATION_URL")
    assert exported(load_demo())["FORMATION_URL"] == "http://127.0.0.1:8000"


@pytest.mark.parametrize(
    "url", ["localhost:8000", "ftp://x", "http://a b", "http://x;id", "http://x/$(id)", "http://x'"]
)
def test_load_demo_refuses_a_base_url_that_is_not_http(settings, url):
    settings.DEBUG = True
    with pytest.raises(CommandError, match="--base-url"):
        load_demo("--base-url", url)


@pytest.mark.django_db
def test_load_demo_revokes_the_previous_demo_tokens(settings):
    """Two ``make run``s leave three working tokens, the second run's, not six."""
    settings.DEBUG = True
    first = exported(load_demo())
    second = exported(load_demo())
    demo = Workspace.objects.get(slug="demo")
    assert ApiToken.objects.filter(workspace=demo, revoked_at__isnull=True).count() == 3
    for name in ("SERVICE_TOKEN", "AGENT_TOKEN", "RUN_TOKEN"):
        assert first[name] != second[name]
        assert stored(first[name]).revoked_at is not None
        assert stored(second[name]).revoked_at is None
    assert factories.bearer_client(first["SERVICE_TOKEN"]).get("/api/v1/agents").status_code == 401
    assert factories.bearer_client(second["SERVICE_TOKEN"]).get("/api/v1/agents").status_code == 200


@pytest.mark.django_db
def test_load_demo_leaves_other_workspaces_tokens_alone(settings):
    settings.DEBUG = True
    other = Workspace.objects.get(pk=uuid.UUID(last_line(run("create_workspace", "other"))))
    raw = last_line(run("create_token", "--workspace", "other", "--service"))
    load_demo()
    load_demo()
    assert stored(raw).revoked_at is None
    assert stored(raw).workspace_id == other.id


@pytest.mark.django_db
def test_load_demo_is_idempotent_and_prints_working_tokens(settings):
    settings.DEBUG = True
    first, second = load_demo(), load_demo()
    assert "Created workspace 'demo'" in first
    assert "Reusing workspace 'demo'" in second
    values = exported(second)
    conversations = (
        factories.bearer_client(values["SERVICE_TOKEN"]).get("/api/v1/conversations").json()
    )
    assert {c["kind"] for c in conversations["items"]} == {"public", "private", "direct", "unknown"}
    private = next(c for c in conversations["items"] if c["kind"] == "private")
    found = factories.bearer_client(values["AGENT_TOKEN"]).get(
        "/api/v1/messages/search", {"query": "migration", "conversationId": private["id"]}
    )
    assert found.status_code == 200
    assert found.json()["total"] >= 1


@pytest.mark.django_db
def test_load_demo_run_token_searches_history_from_adas_direct_room(settings):
    """The printed run token works: search_history finds the private room Ada reads and the
    public room, never the imported archive whose audience is unknown."""
    settings.DEBUG = True
    run_token = exported(load_demo())["RUN_TOKEN"]
    found = factories.bearer_client(run_token).post(
        "/api/v1/history/search", {"query": "migration"}, format="json"
    )
    assert found.status_code == 200
    kinds = {item["conversation"]["kind"] for item in found.json()["items"]}
    assert kinds == {"public", "private", "direct"}


@pytest.mark.django_db
def test_load_demo_gives_each_conversation_its_own_talk(settings):
    """The demo copied the same eight sentences into all four rooms, so a first search looked
    like duplicates, and "migration decision" ranked a message with only "decision" first."""
    settings.DEBUG = True
    values = exported(load_demo())
    texts = list(
        Message.objects.filter(conversation__workspace__slug="demo").values_list(
            "content", flat=True
        )
    )
    assert len(texts) == len(set(texts))

    found = factories.bearer_client(values["AGENT_TOKEN"]).get(
        "/api/v1/messages/search", {"query": "migration"}
    )
    contents = [item["content"] for item in found.json()["items"]]
    assert len(contents) == len(set(contents)) >= 4

    searched = factories.bearer_client(values["RUN_TOKEN"]).post(
        "/api/v1/history/search", {"query": "migration decision"}, format="json"
    )
    first = searched.json()["items"][0]["text"]
    assert "migration" in first.lower()
    assert "decision" in first.lower()


@pytest.mark.django_db
def test_load_demo_run_id_opens_the_runs_trace_and_reply(settings):
    """The printed run id goes with the run token: the trace lists the demo search, and the
    reply from Ada's direct room (evidence from public, private and direct rooms Ada reads)
    is delivered."""
    settings.DEBUG = True
    values = exported(load_demo())
    run_id = values["RUN_ID"]
    client = factories.bearer_client(values["RUN_TOKEN"])
    searched = client.post("/api/v1/history/search", {"query": "migration"}, format="json")
    assert searched.status_code == 200
    trace = client.get(f"/api/v1/runs/{run_id}/trace").json()
    assert [item["type"] for item in trace["items"]] == ["search_audit"]
    reply = client.post(f"/api/v1/runs/{run_id}/reply", {"content": "Noted."}, format="json")
    assert reply.status_code == 201, reply.json()


# --- apply_retention and export_workspace (docs/lifecycle.md) --------------------------------


def test_apply_retention_prints_progress_and_what_it_erased_per_workspace(world):
    workspace_retention_set(workspace_id=world.workspace.id, days=30)
    old = timezone.now() - timedelta(days=31)
    for room in (world.public, world.public, world.private):
        factories.post(room, world.alice, created_at=old)
    factories.other_workspace()

    output = run("apply_retention", "--batch-size", "1")

    lines = output.strip().splitlines()
    assert len([line for line in lines if " so far)" in line]) == 3
    assert lines[-1] == "acme: erased 3 messages in 2 conversations; skipped 0 held conversations"
    assert run("apply_retention").strip().splitlines()[-1].startswith("acme: erased 0 messages")


def test_apply_retention_counts_one_message_in_the_singular(world):
    """It said "erased 1 messages in 1 conversations"."""
    workspace_retention_set(workspace_id=world.workspace.id, days=30)
    factories.post(world.public, world.alice, created_at=timezone.now() - timedelta(days=31))

    output = run("apply_retention")

    assert last_line(output) == (
        "acme: erased 1 message in 1 conversation; skipped 0 held conversations"
    )


@pytest.mark.parametrize(
    "args", [("--batch-size", "0"), ("--batch-size", "10001"), ("--workspace", "nowhere")]
)
def test_apply_retention_refuses_bad_arguments(db, args):
    with pytest.raises(CommandError):
        run("apply_retention", *args)


def test_apply_retention_without_periods_says_so(db):
    assert run("apply_retention").strip() == "no workspace has a retention period"


def test_export_workspace_writes_json_lines(world, tmp_path):
    first = factories.post(world.public, world.alice, "sample one")
    second = factories.post(world.private, world.bob, "sample two")
    target = tmp_path / "export.jsonl"

    output = run("export_workspace", "acme", "--output", str(target), "--batch-size", "1")

    exported_lines = [json.loads(line) for line in target.read_text().splitlines()]
    assert [line["id"] for line in exported_lines] == [str(first.id), str(second.id)]
    assert last_line(output) == f"exported 2 messages of acme to {target}"


def test_export_workspace_dash_writes_json_lines_to_standard_output(world, tmp_path, monkeypatch):
    """``--output -`` wrote a file named ``-``; it is standard output, as in every Unix tool,
    and what is said about the export goes to standard error so the output stays JSON Lines."""
    first = factories.post(world.public, world.alice, "sample one")
    monkeypatch.chdir(tmp_path)
    out, err = io.StringIO(), io.StringIO()

    call_command("export_workspace", "acme", "--output", "-", stdout=out, stderr=err)

    assert [json.loads(line)["id"] for line in out.getvalue().splitlines()] == [str(first.id)]
    assert err.getvalue() == "exported 1 message of acme to standard output\n"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.django_db(transaction=True)  # the command runs in a process of its own
def test_export_workspace_to_a_reader_that_stops_early_ends_in_one_sentence(world):
    """``… --output - | head -n 1``: a CommandError, not a BrokenPipeError traceback, and the
    export recorded as interrupted."""
    from tests.test_mcp import subprocess_database_url

    # After the first line, more than a pipe's buffer (64 KiB on Linux): the command cannot
    # have written everything before the reader stops, however fast it runs.
    factories.post(world.public, world.alice, "sample line 0")
    for index in range(1, 5):
        factories.post(world.public, world.alice, f"sample line {index} " + "filler " * 6_000)
    environment = {
        **os.environ,
        "DATABASE_URL": subprocess_database_url(),
        "DJANGO_SETTINGS_MODULE": "formation.settings_test",
    }
    command = [sys.executable, "manage.py", "export_workspace", "acme", "--output", "-"]
    with subprocess.Popen(
        [*command, "--batch-size", "1"],
        cwd=Path(__file__).resolve().parents[2],  # where manage.py is
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as process:
        assert json.loads(process.stdout.readline())["content"] == "sample line 0"
        process.stdout.close()
        error = process.stderr.read().decode()
        assert process.wait(timeout=60) == 1
    assert "Traceback" not in error
    assert "Standard output was closed after" in error
    event = LifecycleEvent.objects.get(action=LifecycleAction.EXPORT)
    assert event.outcome == LifecycleOutcome.INTERRUPTED


@pytest.mark.parametrize(
    "args",
    [
        ("nowhere", "--output", "{tmp}/x.jsonl"),
        ("acme", "--output", "{tmp}/missing/x.jsonl"),
        ("acme", "--output", "{tmp}/x.jsonl", "--batch-size", "0"),
    ],
)
def test_export_workspace_refuses_bad_arguments(world, tmp_path, args):
    with pytest.raises(CommandError):
        run("export_workspace", *(arg.replace("{tmp}", str(tmp_path)) for arg in args))
