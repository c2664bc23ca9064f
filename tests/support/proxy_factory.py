"""Start a real `hermes-opd proxy` in the test's event loop, in front of the dev vLLM server."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

from environments.proxy.build import build_proxy
from environments.proxy.proxy_config import ProxyConfig
from environments.proxy.server import run_app

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "run_python",
            "description": "Run a Python file.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "write_file",
            "description": "Write a file.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                "required": ["path", "content"],
            },
        },
    },
]
TRACEBACK = "Traceback (most recent call last):\n  File \"main.py\", line 3, in <module>\n    print(total)\nNameError: name 'total' is not defined\nexit code 1"


def proxy_config(dev_server, tmp_path: Path, **overrides) -> ProxyConfig:
    data = {
        "policy_base_url": dev_server.base_url,
        "policy_model": dev_server.model_name,
        "tokenizer": str(dev_server.model_dir),
        "port": 0,
        "groups_path": str(tmp_path / "groups.jsonl"),
        "samples_per_group": 2,
        "group_wait_s": 0.5,
        "opd": {"judge": {"backend": "rules"}, "teacher": {"path": "completions"}},
    }
    data.update(overrides)
    return ProxyConfig.model_validate(data)


@contextlib.asynccontextmanager
async def running_proxy(config: ProxyConfig, tokenizer=None):
    """Yields (base URL …/v1, the ProxyServer); on exit drains the feed and stops."""
    server = await build_proxy(config, tokenizer)
    runner = await run_app(server, config.host, config.port)
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}/v1", server
    finally:
        await server.stop_background(drain_s=120)
        await runner.cleanup()


def read_groups(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


SYSTEM = "You are a coding agent. Use the tools."


USER = "Write main.py that prints the total of 1..10, then run it."


def first_messages(task: str = USER) -> list[dict]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task}]


def next_state(message) -> list[dict]:
    """The reply re-sent as the SDK gives it, then what follows it: tool results or a user message."""
    out = [message.model_dump(exclude_none=True)]
    if message.tool_calls:
        return out + [
            {"role": "tool", "tool_call_id": c.id, "content": TRACEBACK} for c in message.tool_calls
        ]
    return out + [{"role": "user", "content": "No. " + TRACEBACK}]


async def ask(client, messages, *, stream=False, session=None, **kwargs):
    """One request; a streamed answer is put back together into (message dict, finish reason)."""
    headers = {"X-Session-Id": session} if session else None
    params = {
        "model": "dev-model",
        "messages": messages,
        "tools": TOOLS,
        "max_tokens": 96,
        "temperature": 0.7,
        **kwargs,
    }
    if not stream:
        answer = await client.chat.completions.create(**params, extra_headers=headers)
        return answer.choices[0].message, answer.choices[0].finish_reason
    content, calls, finish = "", [], None
    async for chunk in await client.chat.completions.create(**params, stream=True, extra_headers=headers):
        for choice in chunk.choices:
            content += choice.delta.content or ""
            calls += [c.model_dump() for c in choice.delta.tool_calls or []]
            finish = choice.finish_reason or finish
    return {"content": content, "tool_calls": calls}, finish


def capture_generations(server) -> list[tuple[list[int], list[int], list[float]]]:
    """Every (prompt ids, sampled ids, logprobs) the proxy got from vLLM, in order: the ground truth a
    trained sample is compared with."""
    calls: list[tuple[list[int], list[int], list[float]]] = []
    inner = server.client.generate_stream

    async def generate_stream(prompt_ids, **kwargs):
        ids, logprobs = [], []
        async for piece in inner(prompt_ids, **kwargs):
            ids += piece.token_ids
            logprobs += piece.logprobs
            yield piece
        calls.append((list(prompt_ids), ids, logprobs))

    server.client.generate_stream = generate_stream
    return calls


def check_teacher_rows(group, seq, reference_model) -> int:
    """Every teacher row of a sample's scored turns against transformers (the reference model) on the
    teacher's own input: the same top-50 ids, and each logprob within 1e-4. Returns the rows checked."""
    import torch

    from hermes_opd.contract.provenance import sequence_provenance, teacher_input_ids
    from tests.support.oracle import full_logprobs

    tokens = group["tokens"][seq]
    rows = 0
    for index, turn in enumerate(group["overrides"][seq]["opd"]["turns"]):
        if turn["status"] != "scored":
            continue
        start, end = turn["span"]
        teacher_ids = teacher_input_ids(tokens, sequence_provenance(group, seq).turns[index])
        oracle = full_logprobs(reference_model, teacher_ids)
        for j in range(end - start):
            pos = turn["teacher_prompt_len"] + j
            row_ids = group["distill_token_ids"][seq][start + j]
            assert set(row_ids[:50]) == set(oracle[pos].topk(50).indices.tolist())
            expected = oracle[pos, torch.tensor(row_ids)]
            assert (
                torch.max(torch.abs(torch.tensor(group["distill_logprobs"][seq][start + j]) - expected))
                <= 1e-4
            )
            rows += 1
    return rows
