"""One-shot HTTP requests to a model server (I/O): a `/models` listing, a `/tokenize` call, a route
probe, a `/health` poll. Long-lived request traffic goes through `VLLMCompletionsClient`
(client.py); both raise the one error family of `hermes_opd.vllm_api.errors`:

- nothing answers (refused, unknown host, connect timeout): `ServerUnreachableError`;
- no answer in time, or the connection broke: `TransientServerError`.

The message is the underlying error's class and text (`ClientConnectorError: Cannot connect ...`);
callers add which role and which setting. Any status is returned, not raised: each caller knows
what a 404 means to it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import aiohttp

from hermes_opd.vllm_api.endpoint import auth_headers
from hermes_opd.vllm_api.errors import ServerUnreachableError, TransientServerError


@dataclass(frozen=True)
class Answer:
    """A server's answer: its status and body text."""

    status: int
    text: str

    def json(self) -> Any:
        """The body parsed as JSON (raises ValueError when it is not)."""
        return json.loads(self.text)


async def request(
    method: str,
    url: str,
    *,
    api_key: str | None = None,
    payload: dict[str, Any] | None = None,
    timeout_s: float = 30.0,
    connect_timeout_s: float | None = None,
) -> Answer:
    """One `method` request to `url` (a JSON body when `payload` is given) on its own session."""
    timeout = aiohttp.ClientTimeout(total=timeout_s, connect=connect_timeout_s)
    try:
        async with (
            aiohttp.ClientSession(timeout=timeout, headers=auth_headers(api_key)) as session,
            session.request(method, url, json=payload) as response,
        ):
            return Answer(response.status, await response.text())
    except aiohttp.ClientConnectorError as exc:
        raise ServerUnreachableError(f"{type(exc).__name__}: {exc}") from exc
    except TimeoutError as exc:
        raise TransientServerError(f"no answer within {timeout_s:g} s") from exc
    except (aiohttp.ClientError, OSError) as exc:
        raise TransientServerError(f"{type(exc).__name__}: {exc}") from exc
