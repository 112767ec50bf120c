"""The bounds every request is held to before any app sees it: the JSON it may send, the bearer
token it may present, and the MCP envelope around a tool call.

Each app keeps the bounds of its own endpoints in its own ``limits`` module
(``messages_app/limits.py``, ``search_app/limits.py``).
"""

from __future__ import annotations

# Request JSON nested deeper than this is refused (invalid_arguments), whatever its keys.
MAX_NESTING = 32
# A real token is far shorter; a longer bearer value is refused before it is hashed.
MAX_TOKEN_LENGTH = 200
# Unknown keys named in an invalid_arguments error, at most.
MAX_REPORTED_KEYS = 10
# A tool call is a few hundred bytes; this leaves room for any argument a tool takes.
MAX_BODY_BYTES = 1024 * 1024
# Ids are echoed in every answer, so they are bounded like the values allowed to be echoed.
MAX_ID_CHARS = 200
MAX_ID_INTEGER = 2**53 - 1  # what every JSON implementation reads exactly
