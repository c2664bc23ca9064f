"""A lean async client for one OpenAI-compatible `POST {base_url}/chat/completions` (I/O).

What the judge needs from a chat endpoint is one request and one string back per vote. The `openai`
SDK spends about 7 ms of CPU per request on request models, httpx's connection pool and response
models (docs/benchmarks.md); this client is one aiohttp POST and one `json.loads`, well under 1 ms.

Errors keep the SDK's class names and status mapping, so vote errors read as before:
`BadRequestError` (400), `AuthenticationError` (401), `PermissionDeniedError` (403),
`NotFoundError` (404), `ConflictError` (409), `UnprocessableEntityError` (422), `RateLimitError`
(429), `InternalServerError` (>= 500), any other status `ChatStatusError`; `APIConnectionError` when
no answer could be had (refused, reset, broken body). A 2xx that is not a chat completion is
`MalformedResponseError`. All belong to the one error family of `hermes_opd.vllm_api.errors`
(`VLLMError`; `transient` for a 429, a 5xx and no answer). The judge's retries (per vote, honouring
`Retry-After`, within the turn's deadline) are in judge/llm_backend.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Mapping
from typing import Any

import aiohttp

from hermes_opd.vllm_api.endpoint import auth_headers
from hermes_opd.vllm_api.errors import VLLMError


class MalformedResponseError(VLLMError):
    """The endpoint answered 2xx with something that is not a chat completion (never retried)."""


class APIConnectionError(VLLMError, ConnectionError):
    """No answer: the connection was refused, reset or broke mid-body."""

    transient = True


class ChatStatusError(VLLMError):
    """A non-2xx answer. `status_code` and `headers` (for Retry-After) are kept; a 429 or a 5xx is
    `transient`."""

    def __init__(self, status_code: int, body: str, headers: Mapping[str, str]) -> None:
        super().__init__(f"Error code: {status_code} - {body[:300]}")
        self.status_code = status_code
        self.headers = headers
        self.transient = status_code == 429 or status_code >= 500


class BadRequestError(ChatStatusError): ...


class AuthenticationError(ChatStatusError): ...


class PermissionDeniedError(ChatStatusError): ...


class NotFoundError(ChatStatusError): ...


class ConflictError(ChatStatusError): ...


class UnprocessableEntityError(ChatStatusError): ...


class RateLimitError(ChatStatusError): ...


class InternalServerError(ChatStatusError): ...


_BY_STATUS: dict[int, type[ChatStatusError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    422: UnprocessableEntityError,
    429: RateLimitError,
}


def status_error(status: int, body: str, headers: Mapping[str, str]) -> ChatStatusError:
    cls = InternalServerError if status >= 500 else _BY_STATUS.get(status, ChatStatusError)
    return cls(status, body, headers)


def completion_text(body: Any) -> str:
    """The first choice's message content ("" for no choices or null content)."""
    if not isinstance(body, dict) or not isinstance(body.get("choices"), list):
        raise MalformedResponseError(f"not a chat completion: {str(body)[:200]!r}")
    choices = body["choices"]
    if not choices:
        return ""
    try:
        return choices[0]["message"].get("content") or ""
    except (KeyError, TypeError, AttributeError) as exc:
        raise MalformedResponseError(f"not a chat completion: {str(body)[:200]!r}") from exc


class ChatClient:
    """One aiohttp session per event loop; keep-alive connections reused for under 4 s (vLLM drops
    idle ones after 5 s)."""

    def __init__(self, base_url: str, api_key: str | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.url = f"{self.base_url}/chat/completions"
        self.headers = {"Content-Type": "application/json", **auth_headers(api_key)}
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _get_session(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._loop is not loop:
            self._session = aiohttp.ClientSession(
                headers=self.headers, connector=aiohttp.TCPConnector(limit=256, keepalive_timeout=4)
            )
            self._loop = loop
        return self._session

    async def complete(self, payload: dict[str, Any]) -> str:
        """POST the payload; the first choice's text. Raises the errors of the module docstring."""
        session = self._get_session()
        try:
            async with session.post(self.url, data=json.dumps(payload)) as response:
                raw = await response.read()
                status = response.status
                headers = dict(response.headers)
        except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as exc:
            raise APIConnectionError(f"Connection error: {exc}") from exc
        text = raw.decode("utf-8", errors="replace")
        if not 200 <= status < 300:
            raise status_error(status, text, {k.lower(): v for k, v in headers.items()})
        try:
            body = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise MalformedResponseError(f"not a chat completion: {text[:200]!r}") from None
        return completion_text(body)

    async def close(self) -> None:
        if self._session is not None and not self._session.closed:
            with contextlib.suppress(RuntimeError):
                await self._session.close()
        self._session = None
