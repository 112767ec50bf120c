"""No search text reaches the logs (SPEC §9)."""

import logging

from formation.log_filters import StripQueryStrings


def test_request_lines_lose_their_query_strings():
    record = logging.LogRecord(
        "django.server",
        logging.INFO,
        __file__,
        1,
        '"%s" %s %s',
        ("GET /api/v1/messages/search?query=canary-secret HTTP/1.1", "200", "17"),
        None,
    )
    assert StripQueryStrings().filter(record) is True
    line = record.getMessage()
    assert "canary-secret" not in line
    assert line.startswith('"GET /api/v1/messages/search?… HTTP/1.1" 200')


def test_console_handler_carries_the_filter():
    from django.conf import settings

    console = settings.LOGGING["handlers"]["console"]
    assert "strip_query_strings" in console["filters"]
    assert settings.LOGGING["loggers"]["django.server"]["handlers"] == ["console"]
