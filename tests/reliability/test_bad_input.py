"""Bad input, end to end: each case gives a clear error or a documented degradation, never a bare
traceback (docs/reliability.md lists the outcome of each).

Covered elsewhere, and not repeated here: bad YAML, unknown YAML keys and `hermes-opd process`
exit codes (tests/unit/test_configs.py, tests/integration/test_process_job.py), loader-level missing fields and
empty files (tests/unit/test_tasks.py), a teacher with another vocabulary (tests/integration/test_opd_faults.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from environments.atropos.agentic_opd_config import AgenticOPDConfig
from environments.atropos.agentic_opd_env import AgenticOPDEnv
from environments.tasks.loaders import TaskLoadError
from hermes_opd.contract.validation import validate_group
from hermes_opd.devkit.fake_endpoints import FakeVLLM
from tests.support.env_factory import CapturingSampler, make_env

pytestmark = pytest.mark.reliability

REPO = Path(__file__).resolve().parents[2]
HIDDEN_TESTS = "from solution import f\n\n\ndef test_f():\n    assert f() == 1\n"


def tool_call_ids(tokenizer, command: str) -> list[int]:
    call = json.dumps({"name": "terminal", "arguments": {"command": command}})
    return tokenizer.encode(f"<tool_call>{call}</tool_call>", add_special_tokens=False) + [
        tokenizer.eos_token_id
    ]


def scripted(tokenizer, command: str):
    """Reply with a terminal call on the first turn, then a final answer."""
    first = tool_call_ids(tokenizer, command)
    final = tokenizer.encode("Done.", add_special_tokens=False) + [tokenizer.eos_token_id]
    seen: list[int] = []

    def reply(prompt: list[int]) -> list[int]:
        seen.append(len(prompt))
        return first if len(prompt) <= min(seen) else final

    return reply


@contextlib.asynccontextmanager
async def env_on(fake: FakeVLLM, model_dir, tmp_path, **overrides):
    config, servers = AgenticOPDEnv.config_init()
    config.tokenizer_name = str(model_dir)
    config.include_messages = True
    config.metrics_path = str(tmp_path / "metrics.jsonl")
    config.group_size = 2
    config.max_turns = 3
    config.opd_enabled = False
    for key, value in overrides.items():
        setattr(config, key, value)
    servers[0].base_url, servers[0].model_name = fake.base_url, fake.model
    servers[0].tokenizer_name = str(model_dir)
    env = AgenticOPDEnv(config, servers)
    try:
        yield env
    finally:
        for server in env.server.servers:
            if getattr(server, "check_task", None) is not None:
                server.check_task.cancel()
            await server.client.close()


def tool_messages(group: dict) -> list[str]:
    return [m["content"] for seq in group["messages"] for m in seq if m["role"] == "tool"]


# -- tool output ------------------------------------------------------------------------------------
async def test_10mb_tool_output_is_bounded_and_the_rollout_goes_on(dev_model_dir, dev_tokenizer, tmp_path):
    command = "yes 0123456789abcdef | head -c 10000000"
    async with (
        asyncio.timeout(90),
        FakeVLLM(scripted(dev_tokenizer, command)) as fake,
        env_on(fake, dev_model_dir, tmp_path) as env,
    ):
        await env.setup()
        group, _ = await env.collect_trajectories(await env.get_next_item())
    outputs = tool_messages(group)
    assert len(outputs) == 2
    for output in outputs:
        assert len(output) < 21_000  # max_output_bytes (20,000) plus the markers
        assert "output truncated: 9980000 of 10000000 bytes omitted" in output
        assert output.rstrip().endswith("[exit code: 0]")
    # ~20 KB of tool output does not fit the 2048-token budget: the record stops, trimmed, and valid.
    for override, tokens in zip(group["overrides"], group["tokens"], strict=True):
        assert override["stop_reason"] in ("token_budget", "final_answer"), override
        assert override["tool_calls"] == 1 and override["tool_errors"] == 0
        assert len(tokens) <= env.config.max_token_length
    assert validate_group(group) == []


async def test_binary_and_invalid_utf8_output_becomes_valid_text(dev_model_dir, dev_tokenizer, tmp_path):
    command = r"head -c 400 /dev/urandom; printf '\xff\xfe\x00\xc3(\xed\xa0\x80 tail\n'"
    async with (
        asyncio.timeout(90),
        FakeVLLM(scripted(dev_tokenizer, command)) as fake,
        env_on(fake, dev_model_dir, tmp_path) as env,
    ):
        await env.setup()
        group, _ = await env.collect_trajectories(await env.get_next_item())
    outputs = tool_messages(group)
    assert len(outputs) == 2
    for output in outputs:
        output.encode("utf-8")  # no lone surrogates: every character is encodable
        assert "\ufffd" in output and "tail" in output
    assert all(o["stop_reason"] in ("final_answer", "token_budget") for o in group["overrides"])
    assert validate_group(group) == []
    assert validate_group(json.loads(json.dumps(group))) == []  # survives the trip to the API


# -- prompts longer than the budget (the real dev server) ------------------------------------------
def context_length(env: AgenticOPDEnv, prompt: str) -> int:
    """Tokens of the first policy context (system prompt with the tool schemas, user prompt, template)."""
    from environments.rollout.tools import TOOL_SCHEMAS
    from hermes_opd.record.transcript_recorder import TranscriptRecorder

    messages = [{"role": "system", "content": env.config.system_prompt}, {"role": "user", "content": prompt}]
    return len(TranscriptRecorder(env.tokenizer, TOOL_SCHEMAS).start(messages))


def long_task_file(env: AgenticOPDEnv, tmp_path: Path, target_context: int) -> Path:
    """A one-task JSONL whose first context is just over `target_context` tokens."""
    words = "Explain every step in detail and consider each edge case of the input carefully. "
    prompt = "Write solution.py with f() returning 1. "
    while context_length(env, prompt) < target_context:
        prompt += words
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps({"task_id": "long", "prompt": prompt, "hidden_tests": HIDDEN_TESTS}) + "\n")
    env.config.task_source, env.config.task_path, env.config.eval_fraction = "jsonl", str(path), 0.0
    return path


@pytest.mark.integration
async def test_prompt_longer_than_the_budget_stops_with_token_budget(dev_server, tmp_path):
    budget = 512
    env = make_env(dev_server, tmp_path, max_token_length=budget, group_size=2, judge_backend="rules")
    long_task_file(env, tmp_path, 3 * budget)
    await env.setup()
    sampler = CapturingSampler(env)
    async with asyncio.timeout(120):
        group, _ = await env.collect_trajectories(await env.get_next_item())
    assert sampler.calls == []  # nothing is sent to the server
    for override, tokens, masks in zip(group["overrides"], group["tokens"], group["masks"], strict=True):
        assert override["stop_reason"] == "token_budget" and override["turns"] == 0
        assert len(tokens) == budget - 1  # the prompt is cut to the budget; nothing was generated
        assert set(masks) == {-100}
    assert validate_group(group) == []


@pytest.mark.integration
async def test_prompt_that_nearly_fills_the_budget_generates_only_what_fits(
    dev_server, dev_tokenizer, tmp_path
):
    budget = 1536
    env = make_env(
        dev_server, tmp_path, max_token_length=budget, group_size=2, judge_backend="rules", max_turns=4
    )
    long_task_file(env, tmp_path, budget - 60)
    await env.setup()
    sampler = CapturingSampler(env)
    async with asyncio.timeout(120):
        group, _ = await env.collect_trajectories(await env.get_next_item())
    assert sampler.calls, "the server generated the first turn"
    for prompt, generated, _ in sampler.calls:
        assert len(prompt) + len(generated) <= budget
    for override, tokens in zip(group["overrides"], group["tokens"], strict=True):
        assert override["stop_reason"] in ("token_budget", "final_answer", "max_turns"), override
        assert override["turns"] >= 1
        assert len(tokens) <= budget
    assert validate_group(group) == []


# -- datasets ---------------------------------------------------------------------------------------
def offline_env(dev_model_dir, tmp_path, **overrides) -> AgenticOPDEnv:
    config, servers = AgenticOPDEnv.config_init()
    config.tokenizer_name = str(dev_model_dir)
    config.metrics_path = str(tmp_path / "metrics.jsonl")
    config.opd_enabled = False
    for key, value in overrides.items():
        setattr(config, key, value)
    servers[0].tokenizer_name = str(dev_model_dir)
    return AgenticOPDEnv(config, servers)


async def test_empty_dataset_fails_setup_with_a_clear_error(dev_model_dir, tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_text("\n")
    env = offline_env(dev_model_dir, tmp_path, task_source="jsonl", task_path=str(path))
    with pytest.raises(TaskLoadError, match=r"no tasks found in .*empty\.jsonl: the dataset is empty"):
        await env.setup()
    one = tmp_path / "one.jsonl"
    one.write_text(json.dumps({"task_id": "a", "prompt": "p", "hidden_tests": HIDDEN_TESTS}) + "\n")
    env = offline_env(dev_model_dir, tmp_path, task_source="jsonl", task_path=str(one), eval_fraction=1.0)
    with pytest.raises(ValueError, match=r"no training tasks left after holding out eval_fraction=1\.0"):
        await env.setup()
    env = offline_env(dev_model_dir, tmp_path, task_source="jsonl", task_path=None)
    with pytest.raises(ValueError, match="task_source='jsonl' needs task_path"):
        await env.setup()


async def test_dataset_with_missing_fields_names_the_line_and_field(dev_model_dir, tmp_path):
    path = tmp_path / "tasks.jsonl"
    rows = [
        {"task_id": "a", "prompt": "p", "hidden_tests": HIDDEN_TESTS},
        {"task_id": "b", "prompt": "p"},
        {"task_id": "c", "prompt": None, "hidden_tests": HIDDEN_TESTS},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    env = offline_env(dev_model_dir, tmp_path, task_source="jsonl", task_path=str(path))
    with pytest.raises(TaskLoadError, match=r"tasks\.jsonl:2: field 'hidden_tests' .* is missing"):
        await env.setup()
    path.write_text("".join(json.dumps(r) + "\n" for r in rows[::2]))
    with pytest.raises(TaskLoadError, match=r"tasks\.jsonl:2: field 'prompt' .* is null"):
        await env.setup()


async def test_dataset_with_invalid_utf8_names_the_file(dev_model_dir, tmp_path):
    path = tmp_path / "tasks.jsonl"
    path.write_bytes(b'{"task_id": "a", "prompt": "caf\xff", "hidden_tests": "x"}\n')
    env = offline_env(dev_model_dir, tmp_path, task_source="jsonl", task_path=str(path))
    with pytest.raises(TaskLoadError, match=r"tasks\.jsonl"):
        await env.setup()


# -- config -------------------------------------------------------------------------------------------
def test_unknown_config_keys_are_refused_by_the_constructor():
    with pytest.raises(ValidationError, match=r"max_turnz\n  Extra inputs are not permitted"):
        AgenticOPDConfig(tokenizer_name="x", max_turnz=3)
    config = AgenticOPDConfig(tokenizer_name="x")
    with pytest.raises(ValueError, match='has no field "max_turnz"'):
        config.max_turnz = 3  # what tests/env_factory.make_env does with an override


def test_atropos_cli_reports_a_bad_config_without_a_traceback(tmp_path):
    config = tmp_path / "bad.yaml"
    config.write_text("env:\n  group_sise: 4\n")
    proc = subprocess.run(
        [sys.executable, "-m", "environments.atropos.agentic_opd_env", "process", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"agentic-opd process: config error: {config}: env.group_sise: unknown key 'group_sise'; "
        "did you mean 'group_size'?"
    ]
