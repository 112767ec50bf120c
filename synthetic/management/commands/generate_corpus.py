from django.core.management.base import BaseCommand, CommandError, CommandParser

from messages_app.models import Agent, TokenKind
from messages_app.services import token_create
from synthetic.corpus import (
    BUSY_AGENT_CONVERSATIONS,
    BUSY_AGENT_NAME,
    DEFAULT_CHUNK,
    DEFAULT_WORKERS,
    CorpusError,
    CorpusProgress,
    corpus_generate,
)


class Command(BaseCommand):
    help = (
        "Load a deterministic synthetic corpus (workspaces, people, agents, conversations of "
        "every kind, memberships, identity links, messages with deletions, threads and lineage) "
        "through COPY, with search documents and every index in step. Prints progress, the "
        "busy agent's id and, as the last line, an agent token for it."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--messages", type=int, default=100_000, help="Messages to load (default 100000)."
        )
        parser.add_argument(
            "--workspaces", type=int, default=4, help="Workspaces to spread them over (default 4)."
        )
        parser.add_argument(
            "--conversations",
            type=int,
            default=2_000,
            help="Conversations in all, at least 4 per workspace (default 2000).",
        )
        parser.add_argument(
            "--seed",
            type=int,
            default=1,
            help="Same seed and sizes, same corpus; one corpus per seed per database (default 1).",
        )
        parser.add_argument(
            "--chunk-size",
            type=int,
            default=DEFAULT_CHUNK,
            help=f"Messages per COPY and transaction (default {DEFAULT_CHUNK}).",
        )
        parser.add_argument(
            "--workers",
            type=int,
            default=DEFAULT_WORKERS,
            help=(
                "Connections loading workspaces in parallel, at most one per workspace "
                f"(default {DEFAULT_WORKERS})."
            ),
        )

    def handle(
        self,
        *args,
        messages: int,
        workspaces: int,
        conversations: int,
        seed: int,
        chunk_size: int,
        workers: int,
        **options,
    ) -> None:
        try:
            report = corpus_generate(
                messages=messages,
                workspaces=workspaces,
                conversations=conversations,
                seed=seed,
                chunk_size=chunk_size,
                workers=workers,
                progress=self._show,
            )
        except CorpusError as problem:
            raise CommandError(str(problem)) from problem
        counts = ", ".join(
            f"{value} {name.replace('_', ' ')}" for name, value in report.counts.items()
        )
        rate = report.counts["messages"] / report.seconds
        self.stdout.write(f"Loaded {counts} in {report.seconds:.1f} s ({rate:,.0f} messages/s).")
        self.stdout.write(f"Workspaces: {', '.join(report.workspace_slugs)}")
        self.stdout.write(f"Content digest: {report.digest}")
        busy = Agent.objects.get(pk=report.busy_agent_id)
        self.stdout.write(
            f"Busy agent {BUSY_AGENT_NAME!r} (in up to {BUSY_AGENT_CONVERSATIONS} conversations of "
            f"{report.workspace_slugs[0]}): {busy.id}"
        )
        _, raw = token_create(workspace_id=busy.workspace_id, kind=TokenKind.AGENT, agent=busy)
        self.stdout.write(raw)

    def _show(self, progress: CorpusProgress) -> None:
        rate = progress.loaded / progress.seconds if progress.seconds else 0
        self.stdout.write(
            f"  {progress.loaded:,}/{progress.total:,} messages, {progress.seconds:.1f} s "
            f"({rate:,.0f}/s)"
        )
