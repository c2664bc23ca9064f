"""One tool-using rollout: generate, parse tool calls, run tools in the sandbox, repeat.

Tokens come from the policy server as ids and are recorded exactly (`TranscriptRecorder`); text is
decoded only to parse tool calls and to build the structured messages.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from environments.rollout.sandbox.sandbox import Sandbox
from environments.rollout.tool_calls import ToolCall, parse_tool_calls
from environments.rollout.tools import execute_tool_call
from hermes_opd.record.transcript_recorder import TranscriptRecorder
from hermes_opd.vllm_api.wire_format import GeneratedSequence

logger = logging.getLogger(__name__)

Sampler = Callable[[list[int], int], Awaitable[GeneratedSequence]]
"""(context ids, max new tokens) -> one sampled continuation with exact ids and logprobs."""


@dataclass(frozen=True)
class RolloutLimits:
    """Bounds on one rollout."""

    max_turns: int = 6
    max_tokens_per_turn: int = 256
    max_token_length: int = 2048
    """Whole-trajectory token budget (context plus everything generated)."""
    wall_clock_s: float = 120.0
    min_turn_tokens: int = 8
    """Stop instead of starting a turn with fewer new tokens than this left in the budget."""


@dataclass
class RolloutOutcome:
    recorder: TranscriptRecorder
    stop_reason: str
    """final_answer | max_turns | token_budget | wall_clock | generation_error"""
    tool_calls: int = 0
    tool_errors: int = 0
    malformed_calls: int = 0
    duration_s: float = 0.0
    error: str | None = None


def assistant_message(content: str, calls: list[ToolCall]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in calls
        ]
    return message


async def run_rollout(
    *,
    tokenizer: Any,
    sampler: Sampler,
    sandbox: Sandbox,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    limits: RolloutLimits,
) -> RolloutOutcome:
    """Run the agent loop until a final answer or a limit; the record is kept whatever happens."""
    recorder = TranscriptRecorder(tokenizer, tools)
    known = {t["function"]["name"] for t in tools}
    context = recorder.start(messages)
    outcome = RolloutOutcome(recorder=recorder, stop_reason="max_turns")
    started = time.monotonic()
    deadline = started + limits.wall_clock_s
    try:
        for _turn in range(limits.max_turns):
            budget = limits.max_token_length - len(context)
            if budget < limits.min_turn_tokens:
                outcome.stop_reason = "token_budget"
                break
            remaining_s = deadline - time.monotonic()
            if remaining_s <= 0:
                outcome.stop_reason = "wall_clock"
                break
            try:
                async with asyncio.timeout(remaining_s):
                    generated = await sampler(context, min(limits.max_tokens_per_turn, budget))
            except TimeoutError:
                outcome.stop_reason = "wall_clock"
                break
            body_ids, _ = recorder.split_generation(generated.token_ids)
            raw_text = tokenizer.decode(body_ids, skip_special_tokens=False)
            parsed = parse_tool_calls(raw_text, known)
            recorder.record_generation(
                generated.token_ids,
                generated.logprobs,
                assistant_message(parsed.content, parsed.valid_calls),
                raw_text,
                generated.top_ids,
                generated.top_logprobs,
            )
            if not parsed.calls:
                outcome.stop_reason = "final_answer"
                break
            results = []
            for call in parsed.calls:
                remaining_s = max(0.1, deadline - time.monotonic())
                try:
                    async with asyncio.timeout(remaining_s):
                        result = await execute_tool_call(call, sandbox)
                except TimeoutError:
                    outcome.stop_reason = "wall_clock"
                    return outcome
                outcome.tool_calls += 1
                outcome.tool_errors += int(result.is_error)
                outcome.malformed_calls += int(not isinstance(call, ToolCall))
                results.append(
                    {
                        "role": "tool",
                        "name": result.name,
                        "tool_call_id": result.call_id,
                        "content": result.content,
                    }
                )
            # Always record the results: they are the next state of this turn, even if no turn follows.
            context = recorder.extend(results)
        else:
            outcome.stop_reason = "max_turns"
    except Exception as exc:  # noqa: BLE001 - a failed generation ends this rollout, not the group
        logger.warning("rollout stopped by %s: %s", type(exc).__name__, exc)
        outcome.stop_reason = "generation_error"
        outcome.error = f"{type(exc).__name__}: {exc}"
    finally:
        outcome.duration_s = time.monotonic() - started
    return outcome
