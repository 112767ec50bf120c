"""Fixtures for the audit tests."""

from __future__ import annotations

import logging

import pytest


@pytest.fixture
def every_log(caplog):
    """caplog receiving every record of every logger at DEBUG, also from loggers that do not
    propagate (``django.request``, ``django.server``): the raw records, before any filter."""
    loggers = [logging.getLogger()] + [
        logger
        for logger in logging.Logger.manager.loggerDict.values()
        if isinstance(logger, logging.Logger)
    ]
    saved = [(logger, logger.level) for logger in loggers]
    attached = []
    caplog.handler.setLevel(logging.DEBUG)
    for logger in loggers:
        logger.setLevel(logging.DEBUG)
        if not logger.propagate and caplog.handler not in logger.handlers:
            logger.addHandler(caplog.handler)
            attached.append(logger)
    yield caplog
    for logger in attached:
        logger.removeHandler(caplog.handler)
    for logger, level in saved:
        logger.setLevel(level)
