"""Synthetic but exact rollouts for the pipeline benchmark.

Each trajectory is recorded with the project's own `TranscriptRecorder` over a real tokenizer and
its chat template, exactly as the agent loop records one: a system and a user message, then
`turns` assistant turns (text plus a `<tool_call>` block; the last one is a final answer; generated ids = the tokenized text plus
the EOS), each but the last (the final answer) followed by a tool result, and after the last turn the verifier's feedback as a
user message (messages only, as the env appends it). So every turn has a next state and, with a
judge that always votes +1, every turn gets a hint and a teacher request.

Sizes are in tokens of the given tokenizer, filled with Python standard-library source text
(deterministic per seed), so ids, spans and hint anchors are real.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from hermes_opd.record.trajectory import Trajectory
from hermes_opd.record.transcript_recorder import TranscriptRecorder

CORPUS_MODULES = ("json/decoder.py", "textwrap.py", "shlex.py", "argparse.py", "dataclasses.py")


@dataclass(frozen=True)
class SynthSpec:
    rollouts: int = 8
    turns: int = 4
    prompt_tokens: int = 256
    """System + user text, before the first turn."""
    turn_tokens: int = 48
    """Generated ids per assistant turn (approximately; tool-call markup included)."""
    state_tokens: int = 96
    """Tool-result text per turn."""
    seed: int = 0


@lru_cache(maxsize=1)
def _corpus_lines() -> tuple[str, ...]:
    import sysconfig

    stdlib = Path(sysconfig.get_paths()["stdlib"])
    lines: list[str] = []
    for name in CORPUS_MODULES:
        path = stdlib / name
        if path.exists():
            lines.extend(line for line in path.read_text(encoding="utf-8").splitlines() if line.strip())
    if not lines:  # no stdlib sources on disk: a fixed paragraph
        lines = ["def solve(values):", "    return sorted(set(values))", "# the test checks the order"] * 50
    return tuple(lines)


def filler(tokenizer: Any, n_tokens: int, rng: random.Random) -> str:
    """About `n_tokens` tokens of source text from a random place of the corpus."""
    lines = _corpus_lines()
    start = rng.randrange(len(lines))
    text = ""
    i = start
    while len(tokenizer.encode(text, add_special_tokens=False)) < n_tokens:
        text += lines[i % len(lines)] + "\n"
        i += 1
    ids = tokenizer.encode(text, add_special_tokens=False)[:n_tokens]
    return tokenizer.decode(ids, skip_special_tokens=True)


def synth_trajectory(tokenizer: Any, spec: SynthSpec, index: int) -> Trajectory:
    rng = random.Random(spec.seed * 1_000_003 + index)
    system = "You are a coding agent working in a sandbox. Use the tools to write solution.py, run it."
    user = "Fix the failing function in solution.py so that the tests pass.\n\n" + filler(
        tokenizer, max(8, spec.prompt_tokens - 40), rng
    )
    recorder = TranscriptRecorder(tokenizer, tools=None)
    recorder.start([{"role": "system", "content": system}, {"role": "user", "content": user}])
    eos = tokenizer.eos_token_id
    for turn in range(spec.turns):
        command = f"python -m pytest -q tests/test_{index}_{turn}.py"
        call = {"name": "terminal", "arguments": {"command": command}}
        call_text = "<tool_call>\n" + json.dumps(call) + "\n</tool_call>"
        call_len = len(tokenizer.encode(call_text, add_special_tokens=False))
        content = filler(tokenizer, max(4, spec.turn_tokens - call_len - 2), rng)
        last = turn + 1 == spec.turns
        if last:  # the final answer: no tool call
            content = filler(tokenizer, max(4, spec.turn_tokens - 1), rng)
        raw_text = content if last else content + "\n" + call_text
        ids = tokenizer.encode(raw_text, add_special_tokens=False) + [eos]
        logprobs = [round(-0.05 - rng.random() * 2.0, 4) for _ in ids]
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if not last:
            message["tool_calls"] = [
                {
                    "id": f"call_{turn}",
                    "type": "function",
                    "function": {"name": "terminal", "arguments": call["arguments"]},
                }
            ]
        recorder.record_generation(ids, logprobs, message, raw_text)
        if turn + 1 < spec.turns:
            result = (
                filler(tokenizer, spec.state_tokens, rng) + "\nAssertionError: expected 3, got 4\nexit code 1"
            )
            recorder.extend(
                [{"role": "tool", "name": "terminal", "tool_call_id": f"call_{turn}", "content": result}]
            )
    trajectory = recorder.trajectory(score=0.0, finish_reason="final_answer")
    # The verifier's word is the last turn's next state (messages only, as the env appends it).
    trajectory.messages.append(
        {"role": "user", "name": "verifier", "content": "2 of 3 hidden tests failed: test_order, test_empty."}
    )
    return trajectory


def synth_group(tokenizer: Any, spec: SynthSpec) -> list[Trajectory]:
    return [synth_trajectory(tokenizer, spec, i) for i in range(spec.rollouts)]
