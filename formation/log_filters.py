"""Logging filters that keep search text out of the logs (SPEC §9)."""

from __future__ import annotations

import logging
import re

QUERY_STRING = re.compile(r"\?\S*")


class StripQueryStrings(logging.Filter):
    """Remove query strings from request lines: search queries travel in ``?query=``."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(
                QUERY_STRING.sub("?…", arg) if isinstance(arg, str) else arg for arg in record.args
            )
        if isinstance(record.msg, str):
            record.msg = QUERY_STRING.sub("?…", record.msg)
        record.__dict__.pop("request", None)
        return True
