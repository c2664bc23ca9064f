"""Turn pairs and the PRM runner for the judge tests."""

from __future__ import annotations

from typing import Any

from hermes_opd.record.trajectory import TurnSpan
from hermes_opd.record.turn_pairs import TurnPair
from judge.config import JudgeConfig
from judge.judge_turn import judge_process_turn
from judge.make_backend import make_judge_backend


def make_pair() -> TurnPair:
    return TurnPair(
        turn_index=1,
        span=TurnSpan(start=20, end=40, message_index=2),
        assistant_message={
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "type": "function",
                    "function": {"name": "terminal", "arguments": '{"cmd": "python -m app"}'},
                }
            ],
        },
        context_messages=[
            {"role": "system", "content": "You are a coding agent with a terminal."},
            {"role": "user", "content": "Make `python -m app` print the port from config.yaml."},
        ],
        next_state_role="tool",
        next_state_text="[terminal]\nTraceback (most recent call last):\nKeyError: 'port'\nexit code 1",
    )


def next_state_pair(next_state: str | None) -> TurnPair:
    """A one-turn pair whose next state is `next_state` as plain text (None: the turn has none)."""
    return TurnPair(
        turn_index=0,
        span=TurnSpan(start=3, end=9, message_index=2),
        assistant_message={"role": "assistant", "content": "done"},
        context_messages=[{"role": "user", "content": "Write a function."}],
        next_state_role="user" if next_state is not None else None,  # type: ignore[arg-type]
        next_state_text=next_state or "",
    )


TASK = "Write `slugify(text)` in `text_utils.py`."


def pair_with(*state: dict[str, Any], context: list[dict[str, Any]] | None = None) -> TurnPair:
    roles = {m["role"] for m in state}
    return TurnPair(
        turn_index=0,
        span=TurnSpan(start=10, end=20, message_index=2),
        assistant_message={
            "role": "assistant",
            "content": "Writing it.",
            "tool_calls": [
                {"type": "function", "function": {"name": "write_file", "arguments": '{"path": "a.py"}'}}
            ],
        },
        context_messages=context
        or [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": TASK}],
        next_state_role=("tool" if "tool" in roles else "user") if state else None,
        next_state_text="\n\n".join(m["content"] for m in state),
        next_state_messages=tuple(state),
    )


def tool(content: str, name: str = "terminal") -> dict[str, Any]:
    return {"role": "tool", "name": name, "content": content}


async def run_prm(config: JudgeConfig, pair: TurnPair):
    backend = make_judge_backend(config, kind="prm")
    try:
        return await judge_process_turn(pair, backend, config)
    finally:
        await backend.aclose()
