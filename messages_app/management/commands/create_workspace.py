from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils.text import slugify

from formation.errors import InvalidArguments
from messages_app.models import DEFAULT_LANGUAGE
from messages_app.services import workspace_create


class Command(BaseCommand):
    help = "Create a workspace (the tenant). Prints the new workspace id as the last line."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("slug", help="Short unique name, letters, digits, - and _.")
        parser.add_argument("--name", default="", help="Display name (defaults to the slug).")
        parser.add_argument(
            "--language",
            default=DEFAULT_LANGUAGE,
            help="The text search configuration search_history stems and drops stop words "
            f"with: any of the database's (pg_ts_config), e.g. german, french, simple "
            f"(default {DEFAULT_LANGUAGE}: English with accents folded).",
        )

    def handle(self, *args, slug: str, name: str, language: str, **options) -> None:
        if not slug or slugify(slug) != slug.lower() or len(slug) > 64:
            raise CommandError("SLUG must be 1-64 characters of letters, digits, - and _.")
        try:
            workspace = workspace_create(slug=slug, name=name, language=language)
        except InvalidArguments as problem:
            raise CommandError(problem.message) from problem
        self.stdout.write(str(workspace.id))
