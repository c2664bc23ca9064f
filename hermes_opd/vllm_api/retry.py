"""The one retry policy for HTTP calls to a server (vLLM, the judge's endpoint, the Atropos API).

`RetryPolicy` says how many attempts and how long to wait between them (exponential, with jitter:
each wait is 50-100% of `base * 2^(attempt-1)`, capped at `max_delay_s`: tenacity's exponential
wait for the fixed half plus its random exponential wait for the jittered half); `retrying` runs an
async call under it with tenacity, retrying only the errors `retry_on` accepts and raising the last
one.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
    wait_random_exponential,
)
from tenacity.wait import wait_base

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """Attempts and waits for transient failures only (connection errors, timeouts, 5xx)."""

    max_attempts: int = 3
    base_delay_s: float = 0.5
    max_delay_s: float = 8.0

    def wait(self) -> wait_base:
        """The tenacity wait strategy: half of the capped exponential, plus up to as much again."""
        half, cap = self.base_delay_s / 2, self.max_delay_s / 2
        return wait_exponential(multiplier=half, max=cap) + wait_random_exponential(multiplier=half, max=cap)


async def retrying(
    call: Callable[[], Awaitable[T]],
    policy: RetryPolicy,
    retry_on: Callable[[BaseException], bool],
    *,
    logger: logging.Logger | None = None,
    what: str = "request",
) -> T:
    """`await call()`, again after a wait while it raises an error that `retry_on` accepts, at most
    `policy.max_attempts` times in all. Other errors, and the last one, are raised as they are."""

    def before_sleep(state: RetryCallState) -> None:
        if logger is not None and state.outcome is not None and state.next_action is not None:
            logger.warning(
                "%s failed (%s); retry %d/%d in %.1fs",
                what,
                state.outcome.exception(),
                state.attempt_number,
                policy.max_attempts - 1,
                state.next_action.sleep,
            )

    async for attempt in AsyncRetrying(
        stop=stop_after_attempt(max(1, policy.max_attempts)),
        wait=policy.wait(),
        retry=retry_if_exception(retry_on),
        before_sleep=before_sleep,
        reraise=True,
    ):
        with attempt:
            return await call()
    raise AssertionError("unreachable: tenacity returns or raises")  # pragma: no cover
