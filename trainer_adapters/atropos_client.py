"""HTTP client of the Atropos API for a trainer: POST /register, GET /batch (polled with backoff).

The API (atroposlib.api.server) answers `/batch` with `{"batch": [group, ...]}` when a full batch of
`batch_size` sequences is queued, `{"batch": null}` when not yet, and an error object when no
trainer registered. A trainer polls; this client backs off exponentially (with jitter) between
empty answers and between failed connections, so a trainer started before the API (or an API
restarted under it) waits instead of crashing, up to `poll_timeout_s`; a restarted API that has
forgotten the trainer's registration gets it again.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

import httpx

from hermes_opd.contract.errors import HermesOPDError

logger = logging.getLogger(__name__)


NOT_REGISTERED = "Trainer not registered"
"""What atroposlib's `/batch` answers before any `/register` (e.g. after an API restart)."""


class AtroposError(HermesOPDError, RuntimeError):
    """The API answered something a trainer cannot use."""


@dataclass(frozen=True)
class Registration:
    """Body of POST /register (atroposlib.api.server.Registration; every field is required)."""

    wandb_group: str
    wandb_project: str
    batch_size: int
    max_token_len: int
    checkpoint_dir: str
    save_checkpoint_interval: int
    starting_step: int
    num_steps: int


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff: initial, initial*factor, ... capped at maximum, times (1 +- jitter)."""

    initial_s: float = 0.5
    maximum_s: float = 10.0
    factor: float = 2.0
    jitter: float = 0.1

    def delays(self) -> Iterator[float]:
        delay = self.initial_s
        while True:
            yield delay * (1.0 + random.uniform(-self.jitter, self.jitter))
            delay = min(delay * self.factor, self.maximum_s)


class AtroposClient:
    """Synchronous client; one instance per trainer process."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float = 30.0,
        backoff: Backoff | None = None,
        sleep: Callable[[float], None] = time.sleep,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.backoff = backoff or Backoff()
        self._sleep = sleep
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout_s, transport=transport)
        self.trainer_uuid: int | None = None
        self._registration: Registration | None = None

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> AtroposClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _json(self, response: httpx.Response) -> Any:
        if response.status_code != 200:
            raise AtroposError(
                f"{response.request.method} {response.request.url.path} answered "
                f"{response.status_code}: {response.text[:500]}"
            )
        try:
            return response.json()
        except ValueError as exc:
            raise AtroposError(
                f"{response.request.url.path} answered non-JSON: {response.text[:200]}"
            ) from exc

    def register(self, registration: Registration, *, wait_s: float = 60.0) -> int:
        """POST /register; retries connection failures for up to `wait_s` (the API may be starting)."""
        body = self._with_retries(lambda: self._http.post("/register", json=asdict(registration)), wait_s)
        data = self._json(body)
        if "uuid" not in data:
            raise AtroposError(f"/register answered without a uuid: {data}")
        self.trainer_uuid = data["uuid"]
        self._registration = registration
        return self.trainer_uuid

    def status(self) -> dict[str, Any]:
        return self._json(self._http.get("/status"))

    def get_batch(self) -> list[dict[str, Any]] | None:
        """One GET /batch: the list of groups, or None when no full batch is queued yet."""
        data = self._json(self._http.get("/batch"))
        if data.get("status") == "error":
            raise AtroposError(f"/batch: {data.get('message', data)}")
        batch = data.get("batch")
        if batch is None:
            return None
        if not isinstance(batch, list):
            raise AtroposError(f"/batch answered a {type(batch).__name__}, not a list of groups")
        return batch

    def wait_for_batch(self, *, timeout_s: float = 3600.0) -> list[dict[str, Any]]:
        """Poll /batch until a batch arrives, backing off between empty answers and failed
        connections; raise TimeoutError after `timeout_s` without one."""
        deadline = time.monotonic() + timeout_s
        delays = self.backoff.delays()
        while True:
            try:
                batch = self.get_batch()
                if batch is not None:
                    return batch
            except httpx.TransportError as exc:
                logger.warning("Atropos API unreachable (%s); retrying", exc)
            except AtroposError as exc:
                if self._registration is None or NOT_REGISTERED not in str(exc):
                    raise
                # A restarted API has forgotten this trainer (and its queue): register again.
                logger.warning("the Atropos API forgot this trainer (restarted?); registering again")
                self.register(self._registration, wait_s=max(1.0, deadline - time.monotonic()))
                continue
            delay = next(delays)
            if time.monotonic() + delay > deadline:
                raise TimeoutError(f"no batch from {self.base_url}/batch within {timeout_s:.0f} s")
            self._sleep(delay)

    def _with_retries(self, call: Callable[[], httpx.Response], wait_s: float) -> httpx.Response:
        deadline = time.monotonic() + wait_s
        delays = self.backoff.delays()
        while True:
            try:
                return call()
            except httpx.TransportError as exc:
                delay = next(delays)
                if time.monotonic() + delay > deadline:
                    raise AtroposError(f"Atropos API at {self.base_url} unreachable: {exc}") from exc
                logger.info("Atropos API not reachable yet (%s); retrying in %.1f s", exc, delay)
                self._sleep(delay)
