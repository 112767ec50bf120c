import json

from django.core.management.base import BaseCommand, CommandParser

from formation.tools import STYLES, tool_definitions


class Command(BaseCommand):
    help = (
        "Print the agent tools (list_messages, get_message, search_messages, search_history) as "
        "JSON tool definitions for a model API, each in its API's schema dialect: --format "
        "openai (function tools for strict function calling), anthropic (tools with "
        "input_schema), gemini (function declarations) or mcp. The schemas come from the "
        "serializers that validate the REST requests."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--format",
            choices=STYLES,
            default="openai",
            dest="style",
            help="The model API whose shape and schema dialect to print (default: openai).",
        )

    def handle(self, *args, style: str, **options) -> None:
        self.stdout.write(json.dumps(tool_definitions(style), indent=2, ensure_ascii=False))
