"""Fuzzed requests on the Chat Completions, Responses and Anthropic Messages wires of a real
`hermes-opd proxy` (in front of the real dev vLLM): every field valid, invalid, missing or of a
random type, messages, items and blocks mutated one field at a time, deep nesting, broken JSON,
streamed or not. Not one answer may be a 500: a refusal is a 4xx (or a 502/503) in the wire's own
error shape, and an answer is the SDK's own type (`openai` ChatCompletion and its chunks, Response
and its stream events, `anthropic` Message and its stream events).

The cases come from a seeded generator, so a failure names a case that reruns the same way."""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

import aiohttp
import pytest
from anthropic.types import Message, RawMessageStreamEvent
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from tests.support.proxy_factory import proxy_config, running_proxy

pytestmark = [pytest.mark.integration, pytest.mark.reliability]

CASES = 160
"""Requests per wire (about half reach vLLM, each for at most 8 tokens)."""
SEED = 20261206
OPENAI_EVENT = TypeAdapter(ResponseStreamEvent)
ANTHROPIC_EVENT = TypeAdapter(RawMessageStreamEvent)
SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
TEXTS = [
    "",
    "hi",
    "Run main.py.",
    "ünïcödé ✓ 🙂",
    "x" * 3000,
    "\u0000nul",
    "<tool_call>{</tool_call>",
    '{"a": 1}',
]


def junk(rng: random.Random, depth: int = 0) -> Any:
    """A random JSON value of any type."""
    kind = rng.randrange(9 if depth < 3 else 6)
    if kind == 0:
        return None
    if kind == 1:
        return rng.random() < 0.5
    if kind == 2:
        return rng.choice([0, -1, 1, 7, 2**31, 10**30, -(10**20)])
    if kind == 3:
        return rng.choice([0.5, -3.5, 1e308, 2.0, 1e-9])
    if kind in (4, 5):
        return rng.choice([*TEXTS, "auto", "none", "function", "user", "assistant", "text", "tool_use"])
    if kind in (6, 7):
        return [junk(rng, depth + 1) for _ in range(rng.randrange(4))]
    keys = ["type", "text", "role", "content", "name", "id", "call_id", "input", "output", "x"]
    return {rng.choice(keys): junk(rng, depth + 1) for _ in range(rng.randrange(4))}


def deep(depth: int) -> Any:
    value: Any = {"type": "string"}
    for _ in range(depth):
        value = {"type": "object", "properties": {"a": value}}
    return value


def mutate(rng: random.Random, item: dict[str, Any], rate: float) -> dict[str, Any]:
    """`item` with some fields dropped or replaced by random values, and sometimes one added."""
    out = dict(item)
    for key in list(out):
        roll = rng.random()
        if roll < rate / 2:
            del out[key]
        elif roll < rate:
            out[key] = junk(rng)
    if rng.random() < rate:
        out[rng.choice(["cache_control", "extra", "status", "annotations"])] = junk(rng)
    return out


def pick(rng: random.Random, valid: list[Any], rate: float) -> Any:
    return junk(rng) if rng.random() < rate else rng.choice(valid)


# -- the Responses wire --------------------------------------------------------------------------
def responses_item(rng: random.Random, rate: float) -> Any:
    text = rng.choice(TEXTS[:4])
    item = rng.choice(
        [
            {"role": "user", "content": text},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]},
            {"role": "developer", "content": [{"type": "input_text", "text": text}]},
            {"role": "system", "content": text},
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            },
            {"type": "function_call", "call_id": "c1", "name": "run", "arguments": '{"path": "a"}'},
            {"type": "function_call_output", "call_id": "c1", "output": rng.choice(TEXTS)},
            {
                "type": "reasoning",
                "id": "rs_1",
                "summary": [],
                "content": [{"type": "reasoning_text", "text": text}],
            },
            {"role": "user", "content": [{"type": "input_image", "image_url": "http://x"}]},
            {"type": "web_search_call", "id": "w"},
        ]
    )
    if isinstance(item.get("content"), list) and rng.random() < rate:
        item["content"] = [mutate(rng, p, 0.5) for p in item["content"]]
    return mutate(rng, item, rate) if rng.random() < 0.7 else item


def responses_body(rng: random.Random) -> dict[str, Any]:
    rate = rng.choice([0.0, 0.05, 0.2, 0.5])
    tool = {"type": "function", "name": "run", "description": "Run.", "parameters": SCHEMA}
    fields: dict[str, list[Any]] = {
        "model": ["dev-model"] * 8 + ["gpt-5"],
        "input": [
            rng.choice(TEXTS[:4]),
            [{"role": "user", "content": "hi"}],
            [responses_item(rng, rate) for _ in range(rng.randrange(1, 6))]
            + [{"role": "user", "content": "go"}],
        ],
        "instructions": [None, "Be brief.", ""],
        "tools": [
            None,
            [tool],
            [tool, {**tool, "name": "other"}],
            [mutate(rng, tool, 0.5)],
            [{"type": "web_search"}],
        ],
        "tool_choice": [
            "auto",
            "none",
            "required",
            {"type": "function", "name": "run"},
            {"type": "allowed_tools"},
        ],
        "text": [
            {"format": {"type": "text"}},
            {"format": {"type": "json_object"}},
            {"format": {"type": "json_schema", "name": "o", "schema": SCHEMA}},
            {"format": {"type": "json_schema", "name": "o", "schema": junk(rng)}},
        ],
        "max_output_tokens": [1, 4, 8],
        "temperature": [0.0, 0.7, 2.0],
        "top_p": [0.5, 1.0],
        "seed": [0, 1],
        "stream": [True, False],
        "store": [False, True],
        "previous_response_id": [None, "resp_1"],
        "parallel_tool_calls": [True, False],
        "reasoning": [{"effort": "low"}],
        "include": [["reasoning.encrypted_content"]],
        "metadata": [{"k": "v"}],
    }
    body: dict[str, Any] = {"model": "dev-model", "input": "hi", "max_output_tokens": 4}
    for key, valid in fields.items():
        if rng.random() < 0.5:
            body[key] = pick(rng, valid, rate)
    if body.get("max_output_tokens") is None or (
        isinstance(body.get("max_output_tokens"), int) and 0 < body["max_output_tokens"] < 2**31
    ):
        body["max_output_tokens"] = rng.choice([1, 4, 8])  # what vLLM runs stays short
    return body


# -- the Messages wire ---------------------------------------------------------------------------
def anthropic_message(rng: random.Random, rate: float, role: str) -> Any:
    text = rng.choice(TEXTS[:4])
    blocks = {
        "user": [
            {"type": "text", "text": text, "cache_control": {"type": "ephemeral"}},
            {"type": "tool_result", "tool_use_id": "t1", "content": rng.choice(TEXTS)},
            {
                "type": "tool_result",
                "tool_use_id": "t1",
                "is_error": True,
                "content": [{"type": "text", "text": text}],
            },
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}},
        ],
        "assistant": [
            {"type": "text", "text": text},
            {"type": "tool_use", "id": "t1", "name": "run", "input": {"path": "a"}},
            {"type": "thinking", "thinking": text, "signature": "s"},
            {"type": "redacted_thinking", "data": "x"},
        ],
    }[role]
    chosen = [
        mutate(rng, b, rate) if rng.random() < 0.5 else b for b in rng.sample(blocks, rng.randrange(1, 3))
    ]
    message = {"role": role, "content": chosen if rng.random() < 0.7 else text}
    return mutate(rng, message, rate / 2)


def messages_body(rng: random.Random) -> dict[str, Any]:
    rate = rng.choice([0.0, 0.05, 0.2, 0.5])
    tool = {"name": "run", "description": "Run.", "input_schema": SCHEMA}
    history = []
    for _ in range(rng.randrange(0, 3)):
        history += [anthropic_message(rng, rate, "user"), anthropic_message(rng, rate, "assistant")]
    history.append(
        anthropic_message(rng, rate, "user") if rng.random() < 0.5 else {"role": "user", "content": "go"}
    )
    fields: dict[str, list[Any]] = {
        "model": ["dev-model"] * 8 + ["claude-x"],
        "messages": [
            history,
            [{"role": "user", "content": "hi"}],
            [],
            [{"role": "assistant", "content": "pre"}],
        ],
        "system": ["Be brief.", [{"type": "text", "text": "S", "cache_control": {"type": "ephemeral"}}], ""],
        "tools": [
            [tool],
            [tool, {**tool, "name": "other"}],
            [mutate(rng, tool, 0.5)],
            [{"type": "bash_20250124", "name": "bash"}],
            [{**tool, "input_schema": deep(rng.choice([5, 40, 80]))}],
        ],
        "tool_choice": [
            {"type": "auto"},
            {"type": "any"},
            {"type": "none"},
            {"type": "tool", "name": "run"},
            {"type": "tool", "name": "nope"},
        ],
        "stop_sequences": [["END"], [], ["\n\n"]],
        "temperature": [0.0, 0.7, 1.0],
        "top_p": [0.5, 1.0],
        "top_k": [5],
        "stream": [True, False],
        "metadata": [{"user_id": "u"}],
        "thinking": [{"type": "enabled", "budget_tokens": 1024}, {"type": "disabled"}],
        "output_config": [
            {"effort": "low"},
            {"format": {"type": "json_schema", "schema": SCHEMA}},
            {"format": {"type": "json_schema", "schema": junk(rng)}},
        ],
        "context_management": [{"edits": []}],
    }
    body: dict[str, Any] = {
        "model": "dev-model",
        "max_tokens": 4,
        "messages": [{"role": "user", "content": "hi"}],
    }
    for key, valid in fields.items():
        if rng.random() < 0.5:
            body[key] = pick(rng, valid, rate)
    if rng.random() < rate:
        body["max_tokens"] = junk(rng)
    if isinstance(body.get("max_tokens"), int) and 8 < body["max_tokens"] < 2**31:
        body["max_tokens"] = 8  # what vLLM runs stays short
    return body


# -- the Chat Completions wire -------------------------------------------------------------------
def chat_message(rng: random.Random, rate: float) -> Any:
    text = rng.choice(TEXTS[:4])
    call = {"id": "c1", "type": "function", "function": {"name": "run", "arguments": '{"path": "a"}'}}
    message = rng.choice(
        [
            {"role": "user", "content": text},
            {"role": "user", "content": [{"type": "text", "text": text}]},
            {"role": "system", "content": text},
            {"role": "developer", "content": [{"type": "text", "text": text}]},
            {"role": "assistant", "content": text},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "assistant", "content": "", "tool_calls": [mutate(rng, call, 0.5)]},
            {"role": "assistant", "content": text, "reasoning_content": text},
            {"role": "tool", "tool_call_id": "c1", "content": rng.choice(TEXTS)},
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x"}}]},
        ]
    )
    return mutate(rng, message, rate) if rng.random() < 0.7 else message


def chat_body(rng: random.Random) -> dict[str, Any]:
    rate = rng.choice([0.0, 0.05, 0.2, 0.5])
    tool = {"type": "function", "function": {"name": "run", "description": "Run.", "parameters": SCHEMA}}
    fields: dict[str, list[Any]] = {
        "model": ["dev-model"] * 8 + ["gpt-5"],
        "messages": [
            [chat_message(rng, rate) for _ in range(rng.randrange(1, 6))]
            + [{"role": "user", "content": "go"}],
            [{"role": "user", "content": "hi"}],
            [{"role": "system", "content": "S"}, {"role": "user", "content": "hi"}],
            [],
            [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "pre"}],
        ],
        "tools": [
            None,
            [tool],
            [tool, {"type": "function", "function": {**tool["function"], "name": "other"}}],
            [mutate(rng, tool, 0.5)],
            [{"type": "function", "function": {"name": "run", "parameters": deep(rng.choice([5, 40, 80]))}}],
        ],
        "tool_choice": [
            "auto",
            "none",
            "required",
            {"type": "function", "function": {"name": "run"}},
            {"type": "function", "function": {"name": "nope"}},
        ],
        "response_format": [
            {"type": "text"},
            {"type": "json_object"},
            {"type": "json_schema", "json_schema": {"name": "o", "schema": SCHEMA}},
            {"type": "json_schema", "json_schema": {"name": "o", "schema": junk(rng)}},
        ],
        "max_completion_tokens": [1, 4, 8],
        "temperature": [0.0, 0.7, 2.0],
        "top_p": [0.5, 1.0],
        "seed": [0, 1],
        "stop": ["END", ["END", "\n\n"], []],
        "stream": [True, False],
        "stream_options": [{"include_usage": True}, {"include_usage": False}],
        "n": [1] * 6 + [2],
        "logprobs": [True, False],
        "top_logprobs": [0, 3, 20, 21],
        "presence_penalty": [0.0, 0.5],
        "frequency_penalty": [0.0],
        "parallel_tool_calls": [True, False],
        "user": ["u"],
        "metadata": [{"k": "v"}],
    }
    body: dict[str, Any] = {"model": "dev-model", "messages": [{"role": "user", "content": "hi"}]}
    for key, valid in fields.items():
        if rng.random() < 0.3:
            body[key] = pick(rng, valid, rate)
    if "top_logprobs" in body and rng.random() < 0.8:
        body["logprobs"] = True  # mostly the pair that goes together
    if "tool_choice" in body and rng.random() < 0.8:
        body["tools"] = [tool]
    if body.get("max_completion_tokens") is None or (
        isinstance(body.get("max_completion_tokens"), int) and 0 < body["max_completion_tokens"] < 2**31
    ):
        body["max_completion_tokens"] = rng.choice([1, 4, 8])  # what vLLM runs stays short
    return body


# -- sending and checking ------------------------------------------------------------------------
RAW = [
    b"",
    b"{",
    b"[]",
    b"null",
    b'{"model": "dev-model", "input": "\\ud800"}',
    b"\xff\xfe",
    b'"text"',
    json.dumps({"a": deep(200)}).encode(),
]


def sse(text: str) -> list[dict[str, Any]]:
    events = []
    for block in text.strip().split("\n\n"):
        data = [line[6:] for line in block.splitlines() if line.startswith("data: ")]
        assert data, f"an event without data: {block[:200]!r}"
        if data[0] != "[DONE]":  # Chat Completions' last line
            events.append(json.loads(data[0]))
    return events


def check(wire: str, status: int, content_type: str, text: str) -> None:
    assert status != 500, text[:500]
    if status >= 400:
        body = json.loads(text)
        if wire in ("chat", "responses"):
            assert set(body) == {"error"} and isinstance(body["error"]["message"], str), body
        else:
            assert body["type"] == "error" and isinstance(body["error"]["message"], str), body
        return
    assert status == 200
    if wire == "chat":
        if content_type.startswith("text/event-stream"):
            assert text.endswith("data: [DONE]\n\n"), text[-200:]
            for event in sse(text):
                if "error" not in event:  # a failure after the stream began is one error event
                    ChatCompletionChunk.model_validate(event)
        else:
            ChatCompletion.model_validate(json.loads(text))
        return
    if content_type.startswith("text/event-stream"):
        events = sse(text)
        adapter = OPENAI_EVENT if wire == "responses" else ANTHROPIC_EVENT
        for event in events:
            if wire == "messages" and event["type"] == "error":
                continue
            adapter.validate_python(event)
        last = events[-1]["type"]
        assert last in {
            "response.completed",
            "response.incomplete",
            "response.failed",
            "message_stop",
            "error",
        }, last
    elif wire == "responses":
        Response.model_validate(json.loads(text))
    else:
        Message.model_validate(json.loads(text))


async def test_fuzzed_requests_never_get_a_500(dev_server, tmp_path):
    rng, chat_rng = random.Random(SEED), random.Random(SEED + 1)  # each wire its own sequence
    cases: list[tuple[str, str, bytes, dict[str, str]]] = []
    for index in range(CASES):
        cases.append(("chat", "/v1/chat/completions", json.dumps(chat_body(chat_rng)).encode(), {}))
        cases.append(("responses", "/v1/responses", json.dumps(responses_body(rng)).encode(), {}))
        headers = {
            "anthropic-beta": rng.choice(["", "made-up-2099", "interleaved-thinking-2025-05-14,x"]),
            "anthropic-version": "2023-06-01",
        }
        path = "/v1/messages?beta=true" if index % 2 else "/v1/messages"
        cases.append(("messages", path, json.dumps(messages_body(rng)).encode(), headers))
    for raw in RAW:
        cases += [
            ("chat", "/v1/chat/completions", raw, {}),
            ("responses", "/v1/responses", raw, {}),
            ("messages", "/v1/messages", raw, {}),
        ]
    statuses: dict[tuple[str, int], int] = {}
    async with running_proxy(proxy_config(dev_server, tmp_path, train=False)) as (url, _server):
        root = url.removesuffix("/v1")
        limit = asyncio.Semaphore(4)
        async with aiohttp.ClientSession() as http:

            async def send(number: int, wire: str, path: str, body: bytes, headers: dict[str, str]) -> None:
                async with (
                    limit,
                    http.post(
                        root + path, data=body, headers={"Content-Type": "application/json", **headers}
                    ) as response,
                ):
                    text = await response.text(errors="replace")
                    statuses[wire, response.status] = statuses.get((wire, response.status), 0) + 1
                    try:
                        check(wire, response.status, response.headers.get("Content-Type", ""), text)
                    except Exception as exc:
                        raise AssertionError(
                            f"case {number} ({wire}): {body[:600]!r} -> {response.status} {text[:600]!r}"
                        ) from exc

            await asyncio.gather(*(send(i, *case) for i, case in enumerate(cases)))
    assert not [key for key in statuses if key[1] == 500], statuses
    # on each wire the generator reaches both sides of the line: answers and refusals
    for wire in ("chat", "responses", "messages"):
        assert statuses.get((wire, 200), 0) >= CASES // 8, statuses
        assert statuses.get((wire, 400), 0) >= CASES // 4, statuses
