"""``manage.py export_workspace SLUG --output FILE``: a workspace's messages as JSON Lines.

``--output -`` is standard output, as for every Unix tool; the progress and the summary then go
to standard error, so what is piped on is JSON Lines only.
"""

import os
import sys
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser

from audit_app.lifecycle import Actor
from audit_app.models import LifecycleSubject
from formation.display import counted
from messages_app.lifecycle.exports import Export, export_start
from messages_app.lifecycle.shapes import json_lines
from messages_app.limits import DEFAULT_BATCH_SIZE, MAX_BATCH_SIZE
from messages_app.models import Workspace

# How often (in messages) progress is printed.
PROGRESS_EVERY = 10_000


class Command(BaseCommand):
    help = (
        "Write every live message of a workspace to FILE as JSON Lines (one message summary a "
        "line, conversation by conversation, each in order), in constant memory; the export "
        "is recorded in the lifecycle record."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("slug", metavar="SLUG", help="Slug of the workspace.")
        parser.add_argument(
            "--output",
            required=True,
            metavar="FILE",
            help="The file to write (replaced); - writes to standard output.",
        )
        parser.add_argument(
            "--batch-size",
            type=int,
            default=DEFAULT_BATCH_SIZE,
            help=f"Messages read per statement, 1 to {MAX_BATCH_SIZE} "
            f"(default {DEFAULT_BATCH_SIZE}).",
        )

    def handle(self, *args, slug: str, output: str, batch_size: int, **options) -> None:
        if not 1 <= batch_size <= MAX_BATCH_SIZE:
            raise CommandError(f"--batch-size must be between 1 and {MAX_BATCH_SIZE}.")
        workspace = Workspace.objects.filter(slug=slug).first()
        if workspace is None:
            raise CommandError(f"No workspace with slug {slug!r}.")
        to_stdout = output == "-"
        target = Path(output)
        if not to_stdout and not target.parent.is_dir():
            raise CommandError("The output file's directory does not exist.")
        export = export_start(
            workspace_id=workspace.id,
            subject_kind=LifecycleSubject.WORKSPACE,
            subject_id=workspace.id,
            actor=Actor(label="manage.py export_workspace"),
            batch_size=batch_size,
        )
        if to_stdout:
            self.stdout.flush()
            try:
                self._write(export, self._stdout_bytes(), report=self._note)
                self.stdout.flush()
            except BrokenPipeError:
                # The reader stopped early (``| head``). Python would complain again when it
                # flushes standard output at exit, so that now goes nowhere.
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
                raise CommandError(
                    f"Standard output was closed after {counted(export.exported, 'message')}; "
                    "the export is recorded as interrupted."
                ) from None
            self._note(
                f"exported {counted(export.exported, 'message')} of {slug} to standard output"
            )
            return
        with target.open("wb") as file:
            self._write(export, file.write, report=self.stdout.write)
        self.stdout.write(f"exported {counted(export.exported, 'message')} of {slug} to {target}")

    @staticmethod
    def _write(export: Export, write: Callable[[bytes], object], *, report: Callable) -> None:
        reported = 0
        # Closed here if a write fails, so the record says interrupted before the error leaves.
        with closing(export.chunks(json_lines)) as chunks:
            for chunk in chunks:
                write(chunk)
                if export.exported - reported >= PROGRESS_EVERY:
                    reported = export.exported
                    report(f"exported {reported} messages so far")

    def _stdout_bytes(self) -> Callable[[bytes], object]:
        """Standard output's bytes; a text stream (call_command's ``stdout=``) gets text."""
        binary = getattr(self.stdout, "buffer", None)
        if binary is not None:
            return binary.write
        return lambda chunk: self.stdout.write(chunk.decode(), ending="")

    def _note(self, line: str) -> None:
        """Progress on standard error, uncoloured: it is not an error."""
        self.stderr.write(line, style_func=str)
