"""Synthetic agent transcripts for the dev model (pure, deterministic).

The dev model is tiny and trained for a few seconds on these, so that under sampling it emits
ChatML turns with `<tool_call>` blocks, some well formed and some not. That exercises the agent
loop, the tools, the judge and teacher scoring for real on a CPU, with nothing downloaded.
"""

from __future__ import annotations

import json
import random
from typing import Any

TASK_SNIPPETS = [
    ("add", "a, b", "return a + b", "Write `add(a, b)` in solution.py that returns the sum."),
    ("is_even", "n", "return n % 2 == 0", "Write `is_even(n)` in solution.py."),
    ("reverse", "s", "return s[::-1]", "Write `reverse(s)` in solution.py that reverses a string."),
    ("maximum", "xs", "return max(xs)", "Write `maximum(xs)` in solution.py returning the largest item."),
    (
        "count_vowels",
        "s",
        "return sum(c in 'aeiou' for c in s.lower())",
        "Write `count_vowels(s)` in solution.py.",
    ),
    ("square", "x", "return x * x", "Write `square(x)` in solution.py."),
    ("first", "xs", "return xs[0] if xs else None", "Write `first(xs)` in solution.py."),
    ("clamp", "x, lo, hi", "return max(lo, min(hi, x))", "Write `clamp(x, lo, hi)` in solution.py."),
]

DEV_TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": desc,
            "parameters": {"type": "object", "properties": props, "required": list(props)},
        },
    }
    for name, desc, props in [
        ("terminal", "Run a shell command.", {"command": {"type": "string"}}),
        ("write_file", "Write a file.", {"path": {"type": "string"}, "content": {"type": "string"}}),
        ("read_file", "Read a file.", {"path": {"type": "string"}}),
    ]
]


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def synthetic_conversation(rng: random.Random) -> list[dict[str, Any]]:
    """One plausible agent episode: write a solution, run it, maybe fix it, answer."""
    fn, params, body, prompt = rng.choice(TASK_SNIPPETS)
    code = f"def {fn}({params}):\n    {body}\n"
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent. Use the tools, then answer briefly."},
        {"role": "user", "content": prompt},
    ]
    if rng.random() < 0.3:
        buggy = f"def {fn}({params}):\n    return None\n"
        messages.append(
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [_call("write_file", path="solution.py", content=buggy)],
            }
        )
        messages.append(
            {"role": "tool", "name": "write_file", "content": f"wrote {len(buggy)} bytes to solution.py"}
        )
        messages.append(
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [_call("terminal", command="python solution.py")],
            }
        )
        messages.append(
            {
                "role": "tool",
                "name": "terminal",
                "content": "Traceback (most recent call last):\nAssertionError\nexit code 1",
            }
        )
    messages.append(
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [_call("write_file", path="solution.py", content=code)],
        }
    )
    messages.append(
        {"role": "tool", "name": "write_file", "content": f"wrote {len(code)} bytes to solution.py"}
    )
    command = rng.choice(
        ["python solution.py", "cat solution.py", f"python -c 'import solution; print(solution.{fn})'"]
    )
    messages.append(
        {
            "role": "assistant",
            "content": "Let me check it.",
            "tool_calls": [_call("terminal", command=command)],
        }
    )
    messages.append({"role": "tool", "name": "terminal", "content": "exit code 0"})
    messages.append(
        {
            "role": "assistant",
            "content": rng.choice(["Done.", f"`{fn}` is in solution.py.", "The solution is written."]),
        }
    )
    return messages
