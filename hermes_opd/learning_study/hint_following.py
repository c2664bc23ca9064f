"""A student's hint-following on the convention tasks, through the env's own parts (the measurement
behind `hermes-opd student-eval`, hermes_opd/commands/student_eval.py).

For every held-out task and sample:
1. a first attempt without a hint: the env's messages (its system prompt, the task prompt, its tool
   schemas) rendered by the env's `TranscriptRecorder`, one turn of the env's agent loop
   (`run_rollout`, real tools in a real sandbox), graded by the real verifier;
2. when it fails: the next state the env would record (the tool results and the verifier's feedback),
   the rules judge's hint for that turn (`RulesJudgeBackend`, which sees only that next state), and a
   second attempt with that hint appended to the task message exactly where OPD puts it for the
   teacher (`enhance_messages`).

Sampling is transformers generation from the student's weights with the env's prompt rendering (no
vLLM server is needed); temperature 1 and no truncation, as the env's training rollouts, or 0 (greedy,
as the env's `evaluate`). It reports first-attempt success without a hint and success with the hint,
and per convention (name, module) how many attempts of each followed it and what they chose instead
(environments/tasks/convention_choice.py).
"""

from __future__ import annotations

import logging
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from environments.atropos.agentic_opd_config import AgenticOPDConfig
from environments.rollout.agent_loop import RolloutLimits, run_rollout
from environments.rollout.sandbox.sandbox import Sandbox
from environments.rollout.tools import TOOL_SCHEMAS
from environments.rollout.verifier import verify
from environments.tasks.convention_choice import classify_attempt, defined_functions, written_files
from environments.tasks.task import Task
from hermes_opd.record.hint import enhance_messages
from hermes_opd.record.turn_pairs import extract_turn_pairs
from hermes_opd.vllm_api.wire_format import GeneratedSequence
from judge.config import JudgeConfig
from judge.rules_backend import RulesJudgeBackend

logger = logging.getLogger(__name__)


def default_system_prompt() -> str:
    return AgenticOPDConfig.model_fields["system_prompt"].default


class TransformersSampler:
    """The agent loop's `Sampler` over a local transformers model (one sequence per call)."""

    def __init__(self, model_dir: str | Path, temperature: float, seed: int) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        torch.set_num_threads(1)  # a tiny model: one thread is fastest, above all on a shared machine
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
        self.temperature = temperature
        self.generator = torch.Generator().manual_seed(seed)
        self.eos_id = self.tokenizer.convert_tokens_to_ids("<|im_end|>")

    async def __call__(self, context: list[int], max_tokens: int) -> GeneratedSequence:
        return self.sample(context, max_tokens)

    def sample(self, context: list[int], max_tokens: int) -> GeneratedSequence:
        import torch

        ids, logprobs = [], []
        past = None
        step_input = torch.tensor([context])
        with torch.no_grad():
            for _ in range(max_tokens):
                out = self.model(input_ids=step_input, past_key_values=past, use_cache=True)
                past = out.past_key_values
                logp = torch.log_softmax(out.logits[0, -1].float(), dim=-1)
                if self.temperature == 0:
                    token = int(torch.argmax(logp))
                else:
                    probs = torch.softmax(logp / self.temperature, dim=-1)
                    token = int(torch.multinomial(probs, 1, generator=self.generator))
                ids.append(token)
                logprobs.append(float(logp[token]))
                if token == self.eos_id:
                    break
                step_input = torch.tensor([[token]])
        finish = "stop" if ids and ids[-1] == self.eos_id else "length"
        return GeneratedSequence(ids, logprobs, finish, self.tokenizer.decode(ids))


@dataclass
class Attempt:
    task_id: str
    hinted: bool
    passed: bool
    parsed_call: bool
    written: str | None
    defined: str | None = None
    """The first function the written file defines."""
    hint: str | None = None
    convention: str | None = None
    """What the attempt chose for the task's open convention (environments/tasks/convention_choice.py:
    `helpers.py`, ..., `compute`, ..., `other`, `none`); None for a task of another family."""
    followed: bool | None = None
    """Whether that choice is the convention the hints reveal."""


@dataclass
class HintReport:
    temperature: float
    samples: int
    attempts: list[Attempt] = field(default_factory=list)

    def rate(self, hinted: bool, kind: str = "") -> float | None:
        chosen = [a.passed for a in self.attempts if a.hinted == hinted and f"-{kind}" in a.task_id]
        return statistics.fmean(chosen) if chosen else None

    def summary(self) -> dict[str, Any]:
        first = [a for a in self.attempts if not a.hinted]
        hinted = [a for a in self.attempts if a.hinted]
        return {
            "temperature": self.temperature,
            "samples_per_task": self.samples,
            "tasks": len({a.task_id for a in first}),
            "first_attempts": len(first),
            "no_hint_success": self.rate(False),
            "hinted_attempts": len(hinted),
            "hint_success": self.rate(True),
            "no_hint_success_by_kind": {k: self.rate(False, k) for k in ("name", "module")},
            "hint_success_by_kind": {k: self.rate(True, k) for k in ("name", "module")},
            "parsable_tool_call_rate": statistics.fmean(a.parsed_call for a in first) if first else None,
            "failed_first_attempts_without_hint": sum(1 for a in first if not a.passed) - len(hinted),
            "conventions": {"no_hint": self.conventions(first), "hint": self.conventions(hinted)},
        }

    @staticmethod
    def conventions(attempts: list[Attempt]) -> dict[str, dict[str, Any]]:
        """Per kind (name, module): attempts, how many followed the convention, and every choice's count."""
        out: dict[str, dict[str, Any]] = {}
        for kind in ("name", "module"):
            mine = [a for a in attempts if a.followed is not None and f"-{kind}-" in a.task_id]
            if mine:
                out[kind] = {
                    "attempts": len(mine),
                    "followed": sum(bool(a.followed) for a in mine),
                    "chosen": dict(sorted(Counter(str(a.convention) for a in mine).items())),
                }
        return out


async def attempt(
    task: Task, sampler: TransformersSampler, system_prompt: str, hint: str | None, max_tokens: int = 128
):
    """One turn of the env's agent loop on `task`; (Attempt, the env's trajectory of it)."""
    messages = [{"role": "system", "content": system_prompt}, {"role": "user", "content": task.prompt}]
    if hint is not None:
        messages = enhance_messages(messages, hint)
    limits = RolloutLimits(max_turns=1, max_tokens_per_turn=max_tokens)
    async with Sandbox.create() as sandbox:
        outcome = await run_rollout(
            tokenizer=sampler.tokenizer,
            sampler=sampler,
            sandbox=sandbox,
            messages=messages,
            tools=TOOL_SCHEMAS,
            limits=limits,
        )
        verdict = await verify(task, sandbox)
    trajectory = outcome.recorder.trajectory(score=verdict.score, finish_reason=outcome.stop_reason)
    if verdict.feedback and trajectory.turns:  # as the env records it (verifier_feedback: true)
        trajectory.messages.append({"role": "user", "content": verdict.feedback, "name": "verifier"})
    calls = trajectory.messages[2].get("tool_calls", []) if len(trajectory.messages) > 2 else []
    files = written_files(trajectory.messages)
    defined = next((name for _, content in files[:1] for name in defined_functions(content)), None)
    passed = verdict.total > 0 and verdict.passed == verdict.total
    choice = classify_attempt(task.task_id, trajectory.messages, passed)
    result = Attempt(
        task_id=task.task_id,
        hinted=hint is not None,
        passed=passed,
        parsed_call=bool(calls),
        written=files[0][0] if files else None,
        defined=defined,
        hint=hint,
        convention=choice.chosen if choice else None,
        followed=choice.followed if choice else None,
    )
    return result, trajectory


async def measure_hint_following(
    model_dir: str | Path,
    tasks: list[Task],
    *,
    samples: int = 4,
    temperature: float = 1.0,
    seed: int = 0,
    max_tokens: int = 128,
    system_prompt: str | None = None,
    progress: bool = True,
) -> HintReport:
    system_prompt = system_prompt or default_system_prompt()
    sampler = TransformersSampler(model_dir, temperature, seed)
    judge = RulesJudgeBackend(JudgeConfig(backend="rules", m=1))
    report = HintReport(temperature=temperature, samples=samples)
    started = time.monotonic()
    for index, task in enumerate(tasks):
        for _ in range(samples):
            first, trajectory = await attempt(task, sampler, system_prompt, None, max_tokens)
            report.attempts.append(first)
            if first.passed or not trajectory.turns:
                continue
            pair = extract_turn_pairs(trajectory)[0]
            votes = await judge.collect_votes(pair)
            hint = votes[0].hint if votes and votes[0].score == 1 else None
            if hint:
                second, _ = await attempt(task, sampler, system_prompt, hint, max_tokens)
                report.attempts.append(second)
        if progress:
            print(
                f"[{index + 1}/{len(tasks)}] {task.task_id}: {time.monotonic() - started:.0f}s, "
                f"no-hint {report.rate(False)}, hint {report.rate(True)}",
                file=sys.stderr,
                flush=True,
            )
    return report
