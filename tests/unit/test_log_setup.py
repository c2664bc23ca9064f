"""The one logging set-up (hermes_opd/contract/log_setup.py) and what each command asks of it."""

from __future__ import annotations

import logging

import pytest

from hermes_opd.contract.log_setup import LOG_FORMAT, configure_logging

NAMES = ("", "ours_a", "ours_b", "theirs")


@pytest.fixture
def bare_logging():
    """Call it first in the test: no handler on the loggers the tests touch (pytest adds its
    capture handlers to the root logger at each phase; they are put back afterwards)."""
    saved = {name: (logging.getLogger(name).handlers[:], logging.getLogger(name).level) for name in NAMES}

    def clear() -> None:
        for name in NAMES:
            logging.getLogger(name).handlers.clear()

    yield clear
    for name, (handlers, level) in saved.items():
        logger = logging.getLogger(name)
        logger.handlers[:] = handlers
        logger.setLevel(level)


def test_root_set_up_is_basic_config(bare_logging):
    """`hermes-opd`, `train`, `bench`: one stderr handler on the root logger, the root at `level`."""
    bare_logging()
    configure_logging(logging.INFO)
    root = logging.getLogger()
    (handler,) = root.handlers
    assert isinstance(handler, logging.StreamHandler) and handler.formatter._fmt == LOG_FORMAT
    assert root.level == logging.INFO and handler.level == logging.NOTSET


def test_an_existing_set_up_wins_without_override(bare_logging):
    bare_logging()
    configure_logging("info")
    configure_logging("debug")  # `hermes-opd train --log-level DEBUG` under `hermes-opd`: no change
    root = logging.getLogger()
    assert len(root.handlers) == 1 and root.level == logging.INFO


def test_override_sets_the_level_on_root_and_its_handlers(bare_logging):
    """`process` under `hermes-opd` (root at INFO): WARNING on the root and at the handler, which
    also filters the libraries that set their own loggers lower (atroposlib: DEBUG)."""
    bare_logging()
    configure_logging(logging.INFO)
    configure_logging("warning", override=True)
    root = logging.getLogger()
    (handler,) = root.handlers
    assert root.level == logging.WARNING and handler.level == logging.WARNING


def test_override_on_a_bare_root_filters_at_the_handler(bare_logging):
    bare_logging()
    configure_logging("warning", override=True)
    (handler,) = logging.getLogger().handlers
    assert handler.level == logging.WARNING and logging.getLogger().level == logging.WARNING


def test_only_named_loggers(bare_logging):
    """The env's CLI: this project's loggers at INFO, one shared handler; the root (and so every
    library's logger) untouched."""
    bare_logging()
    root_level = logging.getLogger().level
    configure_logging("info", loggers=("ours_a", "ours_b"))
    a, b = logging.getLogger("ours_a"), logging.getLogger("ours_b")
    assert a.handlers == b.handlers and len(a.handlers) == 1
    assert a.level == b.level == logging.INFO
    assert not logging.getLogger().handlers and logging.getLogger().level == root_level
    assert not logging.getLogger("theirs").handlers
