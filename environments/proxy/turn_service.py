"""The proxy's core, the same for every wire: who is asking (`caller`), and one answer
(`answer`): resolve the session, plan it off the event loop, stream from vLLM with the exact
sampled ids and logprobs, hand the wire `ContentDelta` / `ReasoningDelta` events as they arrive and
one `TurnDone`; then commit the session and submit the turn it finished to the background feed
(environments/proxy/sample_feed.py) with `put_nowait`, so nothing on a request's path waits for a
judge, a teacher or a sink.

A refusal raises `WireError` before the first event. A request that fails or is cut off never
commits, so its session stays as it was. Work proportional to a request's size (rendering,
tokenizing, building an output grammar) runs in a small thread pool, bounded per request (the
rendered prompt's tokens) and in total (requests waiting to be planned)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from environments.delivery.policy_adapter import PolicyAdapterTracker, PolicyWeights
from environments.proxy.answer_parse import answer_parts
from environments.proxy.conversation import (
    AnswerStarted,
    AssistantTurn,
    Caller,
    ContentDelta,
    Conversation,
    NamedTool,
    TokenLogprobs,
    ToolCall,
    TurnDone,
    TurnEvent,
    WireError,
)
from environments.proxy.history import HistoryKeys, history_keys
from environments.proxy.latency import LatencyWindow
from environments.proxy.output_grammar import GrammarError, after_thinking, any_object_grammar, schema_grammar
from environments.proxy.proxy_config import END_HEADER, TRAIN_HEADER, ProxyConfig
from environments.proxy.request_body import BODY_BYTES
from environments.proxy.sample_feed import SampleFeed
from environments.proxy.sessions import HeldSession, SessionTable, session_id_from_headers
from environments.proxy.streaming import IncrementalDecoder
from environments.proxy.streaming_split import THINK_CLOSE, THINK_OPEN, StreamSplitter, remainder
from environments.proxy.token_count import tokens_at_least
from environments.proxy.token_logprobs import logprob_entries
from environments.proxy.tool_markup import call_markup, tool_call_grammar
from environments.proxy.turn_sample import TurnSample
from environments.rollout.agent_loop import assistant_message
from hermes_opd.record.transcript_recorder import split_eos
from hermes_opd.vllm_api.client import StreamedTokens, VLLMCompletionsClient
from hermes_opd.vllm_api.errors import BadRequestError, VLLMError
from hermes_opd.vllm_api.wire_format import GeneratedSequence

logger = logging.getLogger(__name__)

LARGE_REQUEST_CHARS = 256 * 1024
"""Requests with more text than this, or a larger body (tool schemas are in the body, not in the
text), are rendered in the large-request threads, apart from the rest."""

LONG_HISTORY = 256
"""Requests with more messages than this have them digested (for the session lookup and the plan)
in a worker thread, not on the event loop."""

NO_TRAIN_VALUES = frozenset({"false", "0", "off", "no"})
OWNER = web.RequestKey("owner", str)
"""Whose sessions a request may touch: one name per API key (set by the server's auth)."""
KEY_KIND = web.RequestKey("key_kind", str)
"""`train` or `serve` (a serve-only key)."""
OPEN = "open"
"""The owner of every session when the proxy takes no keys (loopback only)."""


@dataclass
class Prepared:
    """A planned request: the session's plan (or None), the prompt ids, the output constraint."""

    plan: Any
    context: list[int]
    grammar: str | None
    in_reasoning: bool


@dataclass
class Sampled:
    """What vLLM streamed for one answer."""

    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str = "stop"
    stop_sequence: str | None = None
    upstream_s: float = 0.0
    first_token_s: float | None = None


class TurnService:
    """One proxy's answers: the policy client, the session table, the live weights, the feed."""

    def __init__(
        self, config: ProxyConfig, tokenizer: Any, feed: SampleFeed | None, client: VLLMCompletionsClient
    ) -> None:
        self.config = config
        self.tokenizer = tokenizer
        self.feed = feed
        self.client = client
        self.table = SessionTable.from_config(tokenizer, config)
        self.tracker = PolicyAdapterTracker(client, config.policy_lora_prefix)
        self.weights = PolicyWeights(config.policy_model, 0)
        self.counts: Counter[str] = Counter()
        self.latency = LatencyWindow()
        self.planner = ThreadPoolExecutor(max_workers=config.plan_threads, thread_name_prefix="proxy-plan")
        """The threads that parse large bodies and render large requests: few, so that the event
        loop always gets the interpreter back soon."""
        self.quick_planner = ThreadPoolExecutor(
            max_workers=config.plan_threads, thread_name_prefix="proxy-plan-small"
        )
        """The threads that render ordinary requests, so that they never queue behind large ones
        (seven 3.9 MB requests held a small one for 10 s when both shared one pool)."""
        self._planning = 0
        self._tasks: list[asyncio.Task] = []
        self._longest_token = _longest_token(tokenizer)
        self._thinks = THINK_OPEN in str(getattr(tokenizer, "chat_template", "") or "")
        """The template knows thinking blocks; else answer text is never held back for `<think>`."""

    # -- who asks ------------------------------------------------------------------------------
    def caller(self, request: web.Request) -> Caller:
        headers = request.headers
        serve_only = request[KEY_KIND] == "serve" or not self.config.train or self.feed is None
        opted_out = headers.get(TRAIN_HEADER, "true").strip().lower() in NO_TRAIN_VALUES
        if serve_only:
            self.counts["served_only"] += 1
        return Caller(
            owner=request[OWNER],
            may_train=not serve_only and not opted_out,
            session_id=session_id_from_headers(headers),
            ends_session=headers.get(END_HEADER, "").strip().lower() in {"true", "1", "yes"},
            body_bytes=request.get(BODY_BYTES, 0),
        )

    # -- one answer ----------------------------------------------------------------------------
    async def answer(self, conversation: Conversation, caller: Caller) -> AsyncIterator[TurnEvent]:
        started = time.perf_counter()
        self.counts["requests"] += 1
        self._check_model(conversation)
        keys = await self._history_keys(conversation, caller)
        held, _created = self.table.resolve(caller, conversation, keys)
        async with held.lock:
            prepared = await self._prepare(held, conversation, caller.body_bytes, keys)
            sampled = Sampled()
            decoder = IncrementalDecoder(self.tokenizer)
            splitter = StreamSplitter(self._tool_calls_on(conversation), prepared.in_reasoning, self._thinks)
            weights = self.weights
            started_event: AnswerStarted | None = AnswerStarted(len(prepared.context))
            async for piece in self._stream(conversation, prepared, weights, sampled, caller.may_train):
                if started_event is not None:  # vLLM took the request: the wire may open its answer
                    yield started_event
                    started_event = None
                if not piece.token_ids:
                    continue
                if conversation.logprobs is not None:
                    yield self._token_logprobs(piece)
                for event in splitter.feed(decoder.feed(piece.token_ids)):
                    if sampled.first_token_s is None:
                        sampled.first_token_s = time.perf_counter() - started
                    yield event
            splitter.feed(decoder.flush())
            turn, message, raw = self._turn(
                conversation, decoder.text, sampled, prepared, len(prepared.context)
            )
            self._commit(held, caller, conversation, prepared, sampled, turn, message, raw, weights)
        self.latency.add(time.perf_counter() - started, sampled.upstream_s, sampled.first_token_s)
        if started_event is not None:  # vLLM sent no ids at all
            yield started_event
        rest = remainder(splitter.content, turn.content)
        if rest:
            yield ContentDelta(rest)
        yield TurnDone(turn)

    async def _history_keys(self, conversation: Conversation, caller: Caller) -> HistoryKeys | None:
        """The messages' digests, computed once for the session lookup and the plan: on the loop
        for a short history, in the large-request threads for a long one (None: a request that is
        never recorded, which needs none)."""
        if not caller.may_train:
            return None
        if len(conversation.messages) <= LONG_HISTORY:
            return history_keys(conversation.messages)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.planner, history_keys, conversation.messages)

    def _token_logprobs(self, piece: StreamedTokens) -> TokenLogprobs:
        """The client's logprobs of a piece: one entry per sampled id, the end-of-sequence token
        that ended the answer included, as vLLM's own server gives them."""
        return TokenLogprobs(
            logprob_entries(
                self.tokenizer, piece.token_ids, piece.logprobs, piece.top_ids, piece.top_logprobs
            )
        )

    async def count_prompt_tokens(self, conversation: Conversation, caller: Caller) -> int:
        """The tokens of the prompt `conversation` renders to, as an answer would send it to vLLM
        (Anthropic's `count_tokens`): planned like a request that does not train, within the same
        bounds, touching no session."""
        self._check_model(conversation)
        untrained = Caller(caller.owner, may_train=False, session_id=None)
        held, _created = self.table.resolve(untrained, conversation)
        prepared = await self._prepare(held, conversation, caller.body_bytes)
        return len(prepared.context)

    def _check_model(self, conversation: Conversation) -> None:
        if conversation.model != self.config.model_name:
            raise WireError(
                f"The model {conversation.model!r:.100} does not exist; this proxy serves "
                f"{self.config.model_name!r}.",
                "not_found",
                param="model",
                code="model_not_found",
            )

    @staticmethod
    def _tool_calls_on(conversation: Conversation) -> bool:
        return bool(conversation.tools) and conversation.tool_choice != "none"

    async def _prepare(
        self,
        held: HeldSession,
        conversation: Conversation,
        body_bytes: int = 0,
        keys: HistoryKeys | None = None,
    ) -> Prepared:
        """The session's plan and the output grammar, in the planner threads (bounded): a request
        with much text or a large body in the large-request threads, so that it never holds up the
        small ones."""
        if self._planning >= self.config.max_planning:
            raise WireError("the proxy is preparing too many requests right now; retry later", "overloaded")
        self._planning += 1
        try:
            loop = asyncio.get_running_loop()
            chars = _text_chars(conversation)
            pool = self.planner if max(chars, body_bytes) > LARGE_REQUEST_CHARS else self.quick_planner
            prepared = await loop.run_in_executor(pool, self._prepare_sync, held, conversation, chars, keys)
        finally:
            self._planning -= 1
        if len(prepared.context) > self.config.max_prompt_tokens:
            raise WireError(
                f"the rendered prompt is {len(prepared.context)} tokens; this proxy takes at most "
                f"{self.config.max_prompt_tokens}",
                "too_large",
                param="messages",
                code="context_length_exceeded",
            )
        return prepared

    def _prepare_sync(
        self, held: HeldSession, conversation: Conversation, chars: int, keys: HistoryKeys | None
    ) -> Prepared:
        if chars > self.config.max_prompt_tokens * self._longest_token:
            # no token is longer than `_longest_token` characters: over the bound before rendering
            raise WireError(
                f"the request's text ({chars} characters) is over this proxy's {self.config.max_prompt_tokens} "
                "prompt tokens",
                "too_large",
                param="messages",
                code="context_length_exceeded",
            )
        counted = self._counted_tokens(conversation, chars)
        if counted is not None and counted > self.config.max_prompt_tokens:
            raise WireError(
                f"the request's text is at least {counted} tokens; this proxy takes at most "
                f"{self.config.max_prompt_tokens}",
                "too_large",
                param="messages",
                code="context_length_exceeded",
            )
        grammar = self._grammar(conversation)
        try:
            plan = held.state.plan(conversation.messages, conversation.tools, keys)
        except WireError:
            raise
        except Exception as exc:  # noqa: BLE001 - the model's chat template refused these messages
            logger.warning("the chat template could not render a request", exc_info=True)
            raise WireError(
                f"the model's chat template cannot render these messages: {str(exc)[:300]}", param="messages"
            ) from None
        context = list(plan.context)
        tail = self.tokenizer.decode(context[-4:], skip_special_tokens=False).rstrip()
        opened = tail.endswith(THINK_OPEN)
        if grammar is not None and self._thinks and not tail.endswith(THINK_CLOSE):
            # the model may think first, as under vLLM's reasoning parser (a prompt that closed the
            # thinking block, a template's "thinking off", leaves no room for it)
            grammar = after_thinking(grammar, opened)
        return Prepared(plan, context, grammar, opened)

    def _counted_tokens(self, conversation: Conversation, chars: int) -> int | None:
        """A lower bound on the tokens of a request's texts, each encoded alone, when they might be
        over the bound (None: they cannot be, since a character is at most 4 UTF-8 bytes, a token
        at least one). Counted in small pieces that stop once over the bound
        (environments/proxy/token_count.py), so a request far over it is refused before the chat
        template renders it, and no large encoding is ever held or released at once."""
        backend = getattr(self.tokenizer, "_tokenizer", None)
        if chars * 4 <= self.config.max_prompt_tokens or not hasattr(backend, "encode_batch"):
            return None
        texts = [t for t in _texts(conversation) if t]
        return tokens_at_least(
            lambda batch: backend.encode_batch(batch, add_special_tokens=False),
            texts,
            self.config.max_prompt_tokens,
        )

    def _grammar(self, conversation: Conversation) -> str | None:
        """The grammar `tool_choice` (required or named) or `response_format` asks for, if any."""
        try:
            choice = conversation.tool_choice
            if conversation.tools and (choice == "required" or isinstance(choice, NamedTool)):
                if conversation.output_format is not None:
                    raise GrammarError(
                        "tool_choice 'required' or a named function cannot go with response_format"
                    )
                markup = call_markup(self.tokenizer, conversation.tools)
                return tool_call_grammar(
                    conversation.tools, markup, choice.name if isinstance(choice, NamedTool) else None
                )
            output = conversation.output_format
            if output is None:
                return None
            if output.kind == "json_object":
                return any_object_grammar()
            return schema_grammar(output.schema or {}, "response_format.json_schema.schema")
        except GrammarError as exc:
            param = "response_format" if conversation.output_format is not None else "tool_choice"
            raise WireError(str(exc), param=param) from None

    async def _stream(
        self,
        conversation: Conversation,
        prepared: Prepared,
        weights: PolicyWeights,
        sampled: Sampled,
        recorded: bool,
    ) -> AsyncIterator[StreamedTokens]:
        """vLLM's sampled ids, piece by piece, recorded into `sampled` (a refusal: WireError). The
        first piece, empty, comes as soon as vLLM has accepted the request, before its first token,
        so that the wire can send its headers and opening events while vLLM computes the prompt."""
        extra: dict[str, Any] = {}
        if weights.model != self.client.model:
            extra["model"] = weights.model
        if prepared.grammar is not None:
            extra["structured_outputs"] = {"grammar": prepared.grammar}
        stream = self.client.generate_stream(
            prepared.context,
            max_tokens=conversation.max_tokens or self.config.default_max_tokens,
            temperature=conversation.temperature,
            top_p=conversation.top_p,
            seed=conversation.seed,
            stop=conversation.stop or None,
            extra=extra or None,
            sampled_logprobs=recorded or conversation.logprobs is not None,
            top_logprobs=conversation.logprobs or 0,
        )
        opened = False
        try:
            while True:
                waited = time.perf_counter()
                try:
                    piece = await anext(stream)
                except StopAsyncIteration:
                    return
                finally:
                    sampled.upstream_s += time.perf_counter() - waited
                sampled.token_ids.extend(piece.token_ids)
                sampled.logprobs.extend(piece.logprobs)
                if piece.finish_reason is not None:
                    sampled.finish_reason = piece.finish_reason
                    sampled.stop_sequence = piece.stop_sequence
                if piece.token_ids or not opened:
                    opened = True
                    yield piece
        except BadRequestError as exc:
            raise WireError(f"the policy server refused the request: {exc}") from None
        except VLLMError as exc:
            self.counts["policy_errors"] += 1
            raise WireError(f"the policy server failed: {exc}", "upstream") from None
        finally:
            with contextlib.suppress(Exception):
                await stream.aclose()

    def _turn(
        self, conversation: Conversation, text: str, sampled: Sampled, prepared: Prepared, prompt_tokens: int
    ) -> tuple[AssistantTurn, dict[str, Any], str]:
        """(the answer, the recorder's message, the raw text with special tokens)."""
        ids, _ = split_eos(list(sampled.token_ids), self.tokenizer.eos_token_id)
        raw = self.tokenizer.decode(ids, skip_special_tokens=False)
        finish = "length" if sampled.finish_reason == "length" else "stop"
        parts = answer_parts(
            text,
            conversation.tools,
            tool_calls=self._tool_calls_on(conversation),
            in_reasoning=prepared.in_reasoning,
            thinking=self._thinks,
        )
        content, calls = parts.content, parts.calls
        message = assistant_message(content, calls)
        if parts.reasoning is not None:
            message["reasoning_content"] = parts.reasoning
        turn = AssistantTurn(
            content=content,
            reasoning=parts.reasoning,
            tool_calls=[ToolCall(c.id, c.name, _dumps(c.arguments)) for c in calls],
            finish_reason="tool_calls" if calls else finish,
            prompt_tokens=prompt_tokens,
            completion_tokens=len(sampled.token_ids),
            stop_sequence=sampled.stop_sequence if not calls and finish == "stop" else None,
        )
        return turn, message, raw

    def _commit(
        self,
        held: HeldSession,
        caller: Caller,
        conversation: Conversation,
        prepared: Prepared,
        sampled: Sampled,
        turn: AssistantTurn,
        message: dict[str, Any],
        raw: str,
        weights: PolicyWeights,
    ) -> None:
        record = True
        if len(prepared.context) + len(sampled.token_ids) > self.config.max_sample_tokens or (
            held.state.turn_count >= self.config.max_trained_turns_per_session
        ):
            if not self.counts["turns_over_session_limits"]:
                logger.warning(
                    "a turn over max_sample_tokens (%d) or max_trained_turns_per_session (%d) is "
                    "served, not trained (counted as turns_over_session_limits)",
                    self.config.max_sample_tokens,
                    self.config.max_trained_turns_per_session,
                )
            self.counts["turns_over_session_limits"] += 1
            record = False
        generated = GeneratedSequence(
            list(sampled.token_ids), list(sampled.logprobs), sampled.finish_reason, raw
        )
        reply = {"role": "assistant", "content": turn.content}
        if turn.reasoning is not None:
            reply["reasoning_content"] = turn.reasoning
        if turn.tool_calls:
            reply["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in turn.tool_calls
            ]
        done = held.state.commit(
            prepared.plan, generated, message, raw, reply, (weights.model, weights.version), record=record
        )
        if done.finished is not None and self.feed is not None:
            trajectory, (index, model, version) = done.finished
            self.feed.submit(TurnSample(trajectory, done.session_id, index, model, version))
        if caller.ends_session:
            self.table.end(held, "ended")

    # -- lifecycle -----------------------------------------------------------------------------
    async def start_background(self) -> None:
        for _ in range(self.config.plan_threads):  # start the threads now, not on a request's path
            self.planner.submit(time.sleep, 0.01)
            self.quick_planner.submit(time.sleep, 0.01)
        if self.config.policy_lora_prefix:
            self.weights = await self.tracker.current()
            self._tasks.append(asyncio.create_task(self._poll_adapters()))
        self._tasks.append(asyncio.create_task(self._expire_sessions()))
        if self.feed is not None:
            self.feed.start()

    async def stop_background(self, drain_s: float = 30.0) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(BaseException):
                await task
        self.table.end_all("proxy_stopped")
        if self.feed is not None:
            await self.feed.stop(drain_s)
        await self.client.close()
        self.planner.shutdown(wait=False, cancel_futures=True)
        self.quick_planner.shutdown(wait=False, cancel_futures=True)

    async def _poll_adapters(self) -> None:
        while True:
            await asyncio.sleep(self.config.adapter_poll_s)
            try:
                self.weights = await self.tracker.current()
            except Exception as exc:  # noqa: BLE001 - keep serving the weights we know
                logger.warning("adapter poll failed: %s", exc)

    async def _expire_sessions(self) -> None:
        while True:
            await asyncio.sleep(min(5.0, self.config.session_idle_s / 4))
            self.table.sweep(self.config.session_idle_s)

    async def end_session(self, owner: str, session_id: str) -> bool:
        """DELETE /v1/sessions/{id}: whether there was such a session."""
        held = self.table.find(owner, session_id)
        if held is None:
            return False
        async with held.lock:
            self.table.end(held, "ended")
        return True


def _longest_token(tokenizer: Any) -> int:
    """The most characters one token of `tokenizer` decodes to (at least 1)."""
    ids = range(len(tokenizer))
    return max(1, max((len(t) for t in tokenizer.convert_ids_to_tokens(list(ids)) if t), default=1))


def _texts(conversation: Conversation) -> list[str]:
    """The texts a request brings: message contents, thinking and call arguments."""
    out: list[str] = []
    for message in conversation.messages:
        out += [message.get("content") or "", message.get("reasoning_content") or ""]
        out += [str(call["function"].get("arguments") or "") for call in message.get("tool_calls") or []]
    return out


def _text_chars(conversation: Conversation) -> int:
    """Characters of text a request brings: its prompt is at least this many characters over the
    longest token's length, in tokens."""
    return sum(len(t) for t in _texts(conversation))


def _dumps(arguments: dict[str, Any]) -> str:
    return json.dumps(arguments, ensure_ascii=False)
