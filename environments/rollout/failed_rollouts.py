"""One bad rollout never costs its group: sort `asyncio.gather(..., return_exceptions=True)` results."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TypeVar

logger = logging.getLogger(__name__)
T = TypeVar("T")


def kept_rollouts(outcomes: Sequence[T | BaseException], what: str) -> list[T]:
    """The rollouts that finished, in order. A rollout that raised an Exception is logged and left
    out (the caller counts it); anything that is not an Exception (cancellation, KeyboardInterrupt)
    is re-raised, so shutting down still works."""
    kept: list[T] = []
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            if not isinstance(outcome, Exception):
                raise outcome
            logger.error(
                "%s failed and is left out: %s: %s", what, type(outcome).__name__, outcome, exc_info=outcome
            )
            continue
        kept.append(outcome)
    return kept
