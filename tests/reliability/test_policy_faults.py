"""Policy-server faults through the real env code path: `AgenticOPDEnv` (its `CurrentVLLMServer`,
agent loop, sandboxed tools and verifier) against the fake vLLM (hermes_opd/devkit/fake_endpoints.py) that fails on
demand. OPD is off here: judge and teacher faults are tests/integration/test_opd_faults.py.

Expected outcomes (docs/reliability.md):
- down at start: `setup()` fails at once with `ServerUnreachableError` naming the role and the URL
  (environments/pipeline/role_servers.py; with OPD on too, before the teacher's tokenizer check);
- down after setup (OPD off): each rollout waits at most the server's `health_wait_s`, then ends
  with stop_reason `generation_error` and a `ServerUnreachableError` naming the URL; the group is
  valid;
- killed mid-rollout (SIGKILL while a request is in flight): the turns already taken are kept, the
  rollout ends `generation_error`, the group forms and is valid;
- slow (past the per-request timeout): retried (3 attempts); a transient slowness is absorbed, a
  persistent one degrades the rollout to `generation_error` after about 3 timeouts;
- 500s and dropped connections: retried; success after a transient, `generation_error` otherwise;
- truncated JSON (200 with half a body): `UnexpectedResponseError`, not retried, rollout degraded,
  counted in the metrics as `group/stop_generation_error`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from environments.atropos.agentic_opd_env import AgenticOPDEnv
from hermes_opd.contract.validation import validate_group
from hermes_opd.devkit.fake_endpoints import FakeVLLM
from hermes_opd.runtime.server_process import free_port
from hermes_opd.vllm_api.errors import ServerUnreachableError

pytestmark = pytest.mark.reliability

REPO = Path(__file__).resolve().parents[2]
HEALTH_WAIT_S = 3.0


@pytest.fixture(scope="module")
def replies(dev_tokenizer):
    """(tool call, final answer) as the dev tokenizer's ids, each ending with EOS."""
    eos = dev_tokenizer.eos_token_id
    call = '<tool_call>{"name": "terminal", "arguments": {"command": "echo hi"}}</tool_call>'
    tool_call = dev_tokenizer.encode(call, add_special_tokens=False) + [eos]
    final = dev_tokenizer.encode("All done.", add_special_tokens=False) + [eos]
    return tool_call, final


def first_turn_tool_call(replies):
    """A reply function: a tool call on the first turn (the shortest prompt seen), then a final answer."""
    tool_call, final = replies
    first_len: list[int] = []

    def reply(prompt: list[int]) -> list[int]:
        if not first_len:
            first_len.append(len(prompt))
        return tool_call if len(prompt) <= first_len[0] else final

    return reply


@contextlib.asynccontextmanager
async def policy_env(
    base_url: str, model: str, model_dir, tmp_path, *, server_timeout: int = 10, **overrides
):
    config, servers = AgenticOPDEnv.config_init()
    config.tokenizer_name = str(model_dir)
    config.include_messages = True
    config.metrics_path = str(tmp_path / "metrics.jsonl")
    config.group_size = 2
    config.max_turns = 3
    config.opd_enabled = False
    config.rollout_wall_clock_s = 60
    config.command_timeout_s = 10
    for key, value in overrides.items():
        setattr(config, key, value)
    servers[0].base_url = base_url
    servers[0].model_name = model
    servers[0].tokenizer_name = str(model_dir)
    servers[0].timeout = server_timeout
    env = AgenticOPDEnv(config, servers)
    for server in env.server.servers:
        server.health_wait_s = HEALTH_WAIT_S
    try:
        yield env
    finally:
        for server in env.server.servers:
            task = getattr(server, "check_task", None)
            if task is not None:
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
            await server.client.close()


async def one_group(env: AgenticOPDEnv) -> tuple[dict, float]:
    started = time.monotonic()
    group, backlog = await env.collect_trajectories(await env.get_next_item())
    assert backlog == []
    return group, time.monotonic() - started


def assert_valid(group: dict, size: int = 2) -> None:
    assert len(group["tokens"]) == size
    assert validate_group(group) == [], validate_group(group)[:3]
    for tokens, masks, lps in zip(group["tokens"], group["masks"], group["inference_logprobs"], strict=True):
        assert len(tokens) == len(masks) == len(lps) > 0


def stops(group: dict) -> list[str]:
    return [o["stop_reason"] for o in group["overrides"]]


def last_metrics(tmp_path) -> dict:
    return json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[-1])


# -- down at start -------------------------------------------------------------------------------------
async def test_policy_down_at_start_with_opd_fails_setup_naming_the_url(dev_model_dir, tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1"
    async with policy_env(
        url, "dev-model", dev_model_dir, tmp_path, opd_enabled=True, judge_backend="rules"
    ) as env:
        started = time.monotonic()
        with pytest.raises(ServerUnreachableError, match=rf"^the policy server at {url} \(also the teacher"):
            await asyncio.wait_for(env.setup(), 60)
        assert time.monotonic() - started < 15


async def test_policy_down_after_setup_rollouts_degrade_after_a_bounded_wait(dev_model_dir, tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1"
    async with policy_env(url, "dev-model", dev_model_dir, tmp_path) as env:
        with pytest.raises(ServerUnreachableError, match=rf"^the policy server at {url} is unreachable"):
            await env.setup()
        env.check_servers_at_setup = False  # as if the server died right after the startup check
        await env.setup()
        group, elapsed = await asyncio.wait_for(one_group(env), 90)
        assert stops(group) == ["generation_error"] * 2
        for override in group["overrides"]:
            assert override["error"].startswith("ServerUnreachableError"), override["error"]
            assert f"127.0.0.1:{port}" in override["error"]
            assert override["turns"] == 0
        assert_valid(group)
        assert last_metrics(tmp_path)["group/stop_generation_error"] == 2
        # A second group no longer tries the dead server directly: it waits for /health, bounded.
        group, elapsed2 = await asyncio.wait_for(one_group(env), 90)
        assert stops(group) == ["generation_error"] * 2
        assert any("not healthy after" in o["error"] for o in group["overrides"]), group["overrides"]
        assert elapsed2 < HEALTH_WAIT_S + 30
    print(f"\ndown at start: first group {elapsed:.1f}s, second group {elapsed2:.1f}s")


# -- killed mid-rollout (a real SIGKILL of the server process while a request is in flight) -----------
async def test_policy_killed_mid_rollout_keeps_earlier_turns_and_the_group(dev_model_dir, tmp_path, replies):
    tool_call, final = replies
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "hermes_opd.devkit.fake_endpoints",
        "--port",
        str(port),
        "--replies",
        json.dumps([tool_call, tool_call, final]),
        "--plan",
        "ok,ok",
        "--default",
        "hang",
        "--model",
        "fake-model",
        "--announce-requests",
        cwd=REPO,
        stdout=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    try:
        async with asyncio.timeout(120):
            assert proc.stdout is not None
            assert (await proc.stdout.readline()).strip() == f"PORT {port}".encode()
            async with policy_env(
                f"http://127.0.0.1:{port}/v1", "fake-model", dev_model_dir, tmp_path
            ) as env:
                await env.setup()
                collecting = asyncio.create_task(one_group(env))
                while True:  # wait until a second-turn request is in flight, then kill the server
                    line = (await proc.stdout.readline()).decode()
                    assert line, "fake server exited early"
                    if line.startswith("REQUEST 2"):
                        break
                await asyncio.sleep(0.2)
                os.killpg(proc.pid, signal.SIGKILL)
                group, elapsed = await collecting
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
    assert stops(group) == ["generation_error"] * 2
    for override in group["overrides"]:
        assert override["turns"] == 1 and override["tool_calls"] == 1  # the first turn and its tool ran
        assert override["error"].split(":")[0] in ("ServerUnreachableError", "TransientServerError")
    assert_valid(group)
    assert elapsed < 60
    print(f"\nkilled mid-rollout: group in {elapsed:.1f}s")


# -- slow, 500s, dropped connections: retried, then degraded ------------------------------------------
@pytest.mark.parametrize(
    ("plan", "default", "expected_stop", "error_part"),
    [
        (["slow", "slow"], "ok", "final_answer", None),
        ([], "slow", "generation_error", "did not answer within 2s"),
        (["500", "500"], "ok", "final_answer", None),
        ([], "500", "generation_error", "answered 500"),
        (["drop", "drop"], "ok", "final_answer", None),
        ([], "drop", "generation_error", "broke"),
    ],
    ids=["slow-once", "slow-always", "500-once", "500-always", "drop-once", "drop-always"],
)
async def test_transient_policy_faults_are_retried_then_degraded(
    dev_model_dir, tmp_path, replies, plan, default, expected_stop, error_part
):
    reply = first_turn_tool_call(replies)
    async with (
        asyncio.timeout(90),
        FakeVLLM(reply, plan=plan, default=default, slow_s=30) as fake,
        policy_env(fake.base_url, fake.model, dev_model_dir, tmp_path, server_timeout=2) as env,
    ):
        await env.setup()
        group, elapsed = await one_group(env)
    assert stops(group) == [expected_stop] * 2, [o.get("error") for o in group["overrides"]]
    assert_valid(group)
    if error_part is None:
        # Each rollout's first request failed once and was retried; then two turns went through.
        assert fake.requests.count(plan[0]) == 2 and fake.requests.count("ok") == 4
        assert all(o["turns"] == 2 and "error" not in o for o in group["overrides"])
    else:
        assert fake.requests == [default] * 6, fake.requests  # 3 attempts per rollout, then give up
        assert all(error_part in o["error"] for o in group["overrides"]), [
            o["error"] for o in group["overrides"]
        ]
        assert last_metrics(tmp_path)["group/stop_generation_error"] == 2
    assert elapsed < 45
    print(f"\n{default}/{plan}: group in {elapsed:.1f}s")


async def test_truncated_json_is_not_retried_and_is_counted(dev_model_dir, tmp_path, replies):
    async with (
        asyncio.timeout(60),
        FakeVLLM(first_turn_tool_call(replies), default="truncated") as fake,
        policy_env(fake.base_url, fake.model, dev_model_dir, tmp_path) as env,
    ):
        await env.setup()
        group, elapsed = await one_group(env)
        assert fake.requests == ["truncated"] * 2  # permanent: one request per rollout
        assert stops(group) == ["generation_error"] * 2
        for override in group["overrides"]:
            assert override["error"].startswith("UnexpectedResponseError") and "not JSON" in override["error"]
        assert_valid(group)
        assert last_metrics(tmp_path)["group/stop_generation_error"] == 2
        # The env keeps going: the next group, against a server that answers again, is normal.
        fake.default = "ok"
        group, _ = await one_group(env)
        assert stops(group) == ["final_answer"] * 2
        assert_valid(group)
