"""Escapes the sandbox abuse tests (tests/reliability/test_sandbox_abuse.py, tests/unit/test_sandbox.py,
tests/unit/test_tools.py) do not cover: symlinks planted with the terminal tool against the host side,
signals aimed at the parent and the host, and one rollout reading another rollout's directory,
the last two also through the env (`AgenticOPDEnv` against the fake endpoint of hermes_opd/devkit/fake_endpoints.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest

from environments.atropos.agentic_opd_env import AgenticOPDEnv
from environments.rollout.sandbox.isolation import detect_isolation
from environments.rollout.sandbox.limits import NOBODY_GID, NOBODY_UID, SandboxLimits
from environments.rollout.sandbox.sandbox import Sandbox
from environments.rollout.tool_calls import ToolCall
from environments.rollout.tools import execute_tool_call
from hermes_opd.contract.validation import validate_group
from hermes_opd.devkit.fake_endpoints import FakeVLLM

pytestmark = [
    pytest.mark.reliability,
    pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox drops privileges only when run as root"),
]
ISOLATION = detect_isolation(allow_network=False)
needs_pidns = pytest.mark.skipif(
    not ISOLATION.pid_namespace,
    reason="without a PID namespace `kill -9 -1` reaches every process of the sandbox uid "
    "(use SandboxLimits(user='per_sandbox'))",
)


def terminal(command: str) -> ToolCall:
    return ToolCall(name="terminal", arguments={"command": command}, raw="", id="call-1")


@pytest.fixture
def outside_dir():
    """A directory outside /tmp (which commands see privately), searchable by everyone, like a
    `sandbox_root` or any data directory on the host."""
    path = Path(tempfile.mkdtemp(prefix="hermes-opd-escape-", dir="/var/cache"))
    os.chmod(path, 0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def canary(uid: int, gid: int):
    """A process of the sandbox's uid OUTSIDE any sandbox; the test kills it at the end."""
    proc = subprocess.Popen(["sleep", "120"], user=uid, group=gid, extra_groups=[], start_new_session=True)
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


# -- symlinks planted with the terminal tool --------------------------------------------------------
async def test_cleanup_does_not_follow_symlinks_the_agent_planted(outside_dir):
    (outside_dir / "keep.txt").write_text("precious\n")
    async with asyncio.timeout(60), Sandbox.create(SandboxLimits(command_timeout_s=10)) as sb:
        planted = (
            f"ln -s {outside_dir} dir_link; ln -s {outside_dir}/keep.txt file_link; ln -s / root_link; "
            f"mkdir -p deep/er && ln -s {outside_dir} deep/er/link; ln -s {outside_dir} /tmp/tmp_link; ls"
        )
        result = await execute_tool_call(terminal(planted), sb)
        assert "dir_link" in result.content and not result.is_error
        workdir = sb.workdir
    assert not workdir.exists()
    assert (outside_dir / "keep.txt").read_text() == "precious\n"
    assert [p.name for p in outside_dir.iterdir()] == ["keep.txt"]
    assert Path("/etc/passwd").exists()


@pytest.mark.skipif(not ISOLATION.private_tmp, reason="needs the private /tmp mount")
async def test_a_symlink_in_the_private_tmp_cannot_redirect_the_root_side_setup(outside_dir):
    """Each command's setup runs as root (mkdir -p and a bind mount of the working directory under
    the private /tmp). The agent cannot swap that path for a symlink: the directory is root's, in a
    sticky /tmp, so root never creates anything through a link the agent planted."""
    os.chmod(outside_dir, 0o777)
    async with asyncio.timeout(60), Sandbox.create(SandboxLimits(command_timeout_s=10)) as sb:
        attack = (
            'parent="$(dirname "$PWD")"; rm -rf "$parent" 2>&1; mv "$parent" /tmp/moved 2>&1; '
            f'ln -s {outside_dir} /tmp/evil; ln -s {outside_dir} "$parent/work2" 2>&1; echo attempted'
        )
        first = await execute_tool_call(terminal(attack), sb)
        assert "attempted" in first.content
        assert "Permission denied" in first.content or "not permitted" in first.content
        second = await execute_tool_call(terminal("echo fine > f.txt && cat f.txt && pwd"), sb)
        assert "fine" in second.content and str(sb.workdir) in second.content
    assert list(outside_dir.iterdir()) == []


# -- signals ------------------------------------------------------------------------------------------
@needs_pidns
async def test_signals_aimed_at_the_parent_and_the_host_hurt_nothing():
    limits = SandboxLimits(command_timeout_s=15)  # the env's default: every sandbox is uid 65534
    with canary(NOBODY_UID, NOBODY_GID) as outside_same_uid:
        async with asyncio.timeout(60), Sandbox.create(limits) as victim, Sandbox.create(limits) as attacker:
            victim_run = asyncio.create_task(victim.run("sleep 2.5; echo victim-alive"))
            await asyncio.sleep(0.5)
            attack = (
                "kill -TERM $PPID; kill -KILL $PPID; kill -HUP $PPID; kill -9 -1; kill -TERM -1; kill -STOP -1; "
                f"kill -9 1; kill -9 {os.getpid()}; kill -9 {os.getppid()}; kill -9 {outside_same_uid.pid}; "
                "pkill -9 sleep; echo attacker-done"
            )
            result = await execute_tool_call(terminal(attack), attacker)
            victim_result = await victim_run
            again = await execute_tool_call(terminal("echo still-usable"), attacker)
        assert "attacker-done" in result.content, result.content
        assert victim_result.output.strip() == "victim-alive" and victim_result.exit_code == 0
        assert outside_same_uid.poll() is None, "a process of the same uid outside the sandbox was killed"
        assert "still-usable" in again.content
    os.kill(os.getpid(), 0)  # and this test process is, of course, still here


# -- through the env: concurrent rollouts of one group ------------------------------------------------
@contextlib.asynccontextmanager
async def scripted_env(dev_model_dir, dev_tokenizer, tmp_path, command: str, **overrides):
    eos = dev_tokenizer.eos_token_id
    call = json.dumps({"name": "terminal", "arguments": {"command": command}})
    first = dev_tokenizer.encode(f"<tool_call>{call}</tool_call>", add_special_tokens=False) + [eos]
    final = dev_tokenizer.encode("Done.", add_special_tokens=False) + [eos]
    lengths: list[int] = []

    def reply(prompt: list[int]) -> list[int]:
        lengths.append(len(prompt))
        return first if len(prompt) <= min(lengths) else final

    async with FakeVLLM(reply) as fake:
        config, servers = AgenticOPDEnv.config_init()
        config.tokenizer_name = str(dev_model_dir)
        config.include_messages = True
        config.metrics_path = str(tmp_path / "metrics.jsonl")
        config.group_size = 2
        config.max_turns = 3
        config.opd_enabled = False
        for key, value in overrides.items():
            setattr(config, key, value)
        servers[0].base_url, servers[0].model_name = fake.base_url, fake.model
        servers[0].tokenizer_name = str(dev_model_dir)
        env = AgenticOPDEnv(config, servers)
        try:
            await env.setup()
            yield env
        finally:
            for server in env.server.servers:
                if getattr(server, "check_task", None) is not None:
                    server.check_task.cancel()
                await server.client.close()


def first_tool_outputs(group: dict) -> list[str]:
    return [next(m["content"] for m in seq if m["role"] == "tool") for seq in group["messages"]]


@needs_pidns
async def test_rollouts_that_signal_everything_leave_the_group_intact(dev_model_dir, dev_tokenizer, tmp_path):
    command = "kill -9 -1; kill -TERM $PPID; kill -KILL $PPID; sleep 0.5; echo survived"
    async with asyncio.timeout(90), scripted_env(dev_model_dir, dev_tokenizer, tmp_path, command) as env:
        group, _ = await env.collect_trajectories(await env.get_next_item())
    assert all("survived" in out for out in first_tool_outputs(group)), first_tool_outputs(group)
    assert [o["stop_reason"] for o in group["overrides"]] == ["final_answer"] * 2
    assert validate_group(group) == []


READ_SIBLINGS = (
    'echo "secret-of-$(basename "$(dirname "$PWD")")" > secret.txt; sleep 1.5; '
    "cat ../../*/work/secret.txt 2>&1; echo planted > ../../planted.txt 2>&1; ls ../.. 2>&1; true"
)


async def read_sibling_outputs(dev_model_dir, dev_tokenizer, tmp_path, **overrides) -> list[str]:
    async with (
        asyncio.timeout(90),
        scripted_env(dev_model_dir, dev_tokenizer, tmp_path, READ_SIBLINGS, **overrides) as env,
    ):
        group, _ = await env.collect_trajectories(await env.get_next_item())
    assert validate_group(group) == []
    return first_tool_outputs(group)


async def test_a_rollout_cannot_read_another_rollouts_directory(dev_model_dir, dev_tokenizer, tmp_path):
    """The env's defaults: sandboxes under the temp dir, which every command sees privately."""
    for output in await read_sibling_outputs(dev_model_dir, dev_tokenizer, tmp_path):
        assert output.count("secret-of-") == 1, output  # its own secret only


async def test_a_rollout_cannot_read_another_rollouts_directory_under_a_shared_sandbox_root(
    dev_model_dir, dev_tokenizer, tmp_path, outside_dir
):
    """A `sandbox_root` outside /tmp is visible to every command; what keeps rollouts apart there is
    their own uid (the env's default `sandbox_user: per_sandbox`). With `sandbox_user: nobody` they
    read and write each other's directories (measured; docs/reliability.md)."""
    outputs = await read_sibling_outputs(
        dev_model_dir, dev_tokenizer, tmp_path, sandbox_root=str(outside_dir)
    )
    assert not (outside_dir / "planted.txt").exists()
    for output in outputs:
        assert output.count("secret-of-") == 1, output


DEEP_TREE_COMMAND = (
    "python3 -c \"import os\nfor _ in range(5000):\n    os.mkdir('d'); os.chdir('d')\"; echo deep-done"
)


def containers_in_tmp() -> set[Path]:
    return {p for p in Path(tempfile.gettempdir()).iterdir() if p.name.startswith("hermes-sbx-")}


async def test_a_5000_level_tree_costs_only_its_rollout_not_the_group(dev_model_dir, dev_tokenizer, tmp_path):
    """Once, Sandbox.close raised RecursionError on such a tree: the group was lost and its
    containers leaked. Now the group arrives, the rollouts score 0, and nothing is left."""
    before = containers_in_tmp()
    async with (
        asyncio.timeout(180),
        scripted_env(dev_model_dir, dev_tokenizer, tmp_path, DEEP_TREE_COMMAND) as env,
    ):
        group, _ = await env.collect_trajectories(await env.get_next_item())
    assert group is not None and len(group["tokens"]) == 2
    assert all("deep-done" in out for out in first_tool_outputs(group)), first_tool_outputs(group)
    assert group["scores"] == [0.0, 0.0]
    assert validate_group(group) == []
    assert containers_in_tmp() - before == set()


async def test_a_rollout_that_raises_is_left_out_and_counted(
    dev_model_dir, dev_tokenizer, tmp_path, monkeypatch
):
    async with asyncio.timeout(120), scripted_env(dev_model_dir, dev_tokenizer, tmp_path, "echo hi") as env:
        real = env._rollout_and_distill

        async def flaky(task, index, *rest):
            if index == 0:
                raise RuntimeError("the policy server went away")
            return await real(task, index, *rest)

        monkeypatch.setattr(env, "_rollout_and_distill", flaky)
        group, _ = await env.collect_trajectories(await env.get_next_item())
        assert group is not None and len(group["tokens"]) == 1
        # atroposlib's send path keeps a group only when len(tokens) == group_overrides' group_size
        assert group["group_overrides"]["group_size"] == 1
        assert validate_group(group) == []
        assert env._pending_metrics[-1]["group/rollouts_failed"] == 1
        assert '"group/rollouts_failed": 1' in (tmp_path / "metrics.jsonl").read_text()
