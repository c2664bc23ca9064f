"""Real agent CLIs from the npm registry (Codex CLI, Claude Code), installed once into the test cache
and run against a base URL, as a new user would point them at `hermes-opd proxy`.

The versions are the ones measured in the project's notes on agent clients; the install is skipped
(with its reason) where npm or the registry cannot be reached, never faked."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.proxy_factory import proxy_config, read_groups
from tests.support.waiting import wait_for

CLIENTS = {"codex": "@openai/codex@0.171.0", "claude": "@anthropic-ai/claude-code@2.1.197"}
INSTALL_TIMEOUT_S = 300


def cache_dir() -> Path:
    return Path(os.environ.get("HERMES_OPD_CACHE", ".cache")).resolve() / "agent-clients"


def install_agent_clients() -> Path:
    """The `node_modules/.bin` with `codex` and `claude`, installed from the registry on first use."""
    root = cache_dir()
    bin_dir = root / "node_modules" / ".bin"
    if all((bin_dir / name).exists() for name in CLIENTS):
        return bin_dir
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm is not installed: the agent CLIs cannot be installed")
    root.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [
            npm,
            "install",
            "--no-audit",
            "--no-fund",
            "--loglevel=error",
            "--prefix",
            str(root),
            *CLIENTS.values(),
        ],
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT_S,
    )
    if done.returncode != 0 or not all((bin_dir / name).exists() for name in CLIENTS):
        pytest.skip(f"npm install of the agent CLIs failed: {done.stderr.strip()[-300:]}")
    return bin_dir


@dataclass
class ClientRun:
    returncode: int
    stdout: str
    stderr: str


async def _run(argv: list[str], env: dict[str, str], cwd: Path, timeout_s: float) -> ClientRun:
    """Run a CLI without blocking the loop the proxy serves on; killed (whole group) at the timeout."""
    process = await asyncio.create_subprocess_exec(
        *argv,
        cwd=str(cwd),
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), timeout_s)
    except TimeoutError:
        os.killpg(process.pid, 9)
        out, err = await process.communicate()
    return ClientRun(
        process.returncode if process.returncode is not None else -9,
        out.decode(errors="replace"),
        err.decode(errors="replace"),
    )


def _base_env(home: Path) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "CODEX_", "CLAUDE"))
    }
    env.update(HOME=str(home), NO_COLOR="1", CI="1", DISABLE_AUTOUPDATER="1")
    return env


async def run_codex(
    bin_dir: Path, base_url: str, model: str, workdir: Path, prompt: str, timeout_s: float = 240.0
) -> ClientRun:
    """`codex exec` against `base_url` (…/v1) with the Responses wire, non-interactive."""
    home = workdir.parent / "codex-home"
    home.mkdir(exist_ok=True)
    (home / "config.toml").write_text(
        f'model = "{model}"\nmodel_provider = "proxy"\n'
        f'[model_providers.proxy]\nname = "proxy"\nbase_url = "{base_url}"\nwire_api = "responses"\n'
        'env_key = "HERMES_OPD_TEST_KEY"\nstream_max_retries = 0\nrequest_max_retries = 0\n'
    )
    env = _base_env(home) | {"CODEX_HOME": str(home), "HERMES_OPD_TEST_KEY": "test-key"}
    # no sandbox: Codex's Linux sandbox needs helper links it refuses to make under /tmp (where the
    # tests' folders are), and the command it runs is the test model's `echo hi`
    argv = [
        str(bin_dir / "codex"),
        "exec",
        "--skip-git-repo-check",
        "--sandbox",
        "danger-full-access",
        prompt,
    ]
    return await _run(argv, env, workdir, timeout_s)


async def run_claude(
    bin_dir: Path, root_url: str, model: str, workdir: Path, prompt: str, timeout_s: float = 240.0
) -> ClientRun:
    """`claude -p` against `root_url` (no /v1: the SDK adds /v1/messages), Bash allowed, its
    non-essential traffic left on, so that it makes its title call too."""
    home = workdir.parent / "claude-home"
    home.mkdir(exist_ok=True)
    env = _base_env(home) | {
        "ANTHROPIC_BASE_URL": root_url,
        "ANTHROPIC_API_KEY": "test-key",
        "DISABLE_TELEMETRY": "1",
    }
    argv = [
        str(bin_dir / "claude"),
        "-p",
        prompt,
        "--model",
        model,
        "--allowedTools",
        "Bash",
        "--max-turns",
        "3",
    ]
    return await _run(argv, env, workdir, timeout_s)


# -- what every client test checks on the proxy's side -----------------------------------------------

ANSWER = "Done: the command ran."
"""The agent dev model's answer once a tool result is back (hermes_opd/devkit/agent_chat_template.jinja)."""
GROUP_WAIT_S = 300


def config(server, tmp_path, **overrides):
    """The quick start's proxy: `opd` at its defaults (an `llm` judge and the teacher on the policy);
    every finished turn its own group, so a one-turn conversation writes one."""
    return proxy_config(server, tmp_path, **{"opd": {}, "samples_per_group": 1, **overrides})


async def written(tmp_path, count: int = 1) -> list[dict]:
    path = tmp_path / "groups.jsonl"
    await wait_for(lambda: len(read_groups(path)) >= count, GROUP_WAIT_S, f"{count} group(s) in {path}")
    return read_groups(path)


def check_trained(tmp_path, generations, turns: int = 1) -> None:
    """`turns` samples, validated clean, each exactly what vLLM sampled, scored by the teacher where
    the default judge gave a hint."""
    groups = read_groups(tmp_path / "groups.jsonl")
    assert sum(len(g["tokens"]) for g in groups) == turns
    assert untrained_ids(groups, generations) == []
    report = validated(tmp_path / "groups.jsonl")
    scored = [t for t in opd_turns(groups) if t["status"] == "scored"]
    assert scored and all(t["hint"] for t in scored), opd_turns(groups)
    assert report.turns_scored == len(scored) and report.positions_scored > 0


def no_forks(counts) -> None:
    assert not {k: v for k, v in counts.items() if k.startswith(("forks_", "turns_dropped"))}, dict(counts)


@dataclass
class Exchange:
    """One request as the proxy understood it (any wire) and the turn it answered."""

    conversation: Any
    """environments.proxy.conversation.Conversation"""
    caller: Any
    turn: Any = None
    """environments.proxy.conversation.AssistantTurn; None when the answer failed."""


def capture_exchanges(server) -> list[Exchange]:
    """Every request the proxy's turn service answers, with its caller and finished turn."""
    from environments.proxy.conversation import TurnDone

    seen: list[Exchange] = []
    inner = server.service.answer

    async def answer(conversation, caller):
        exchange = Exchange(conversation, caller)
        seen.append(exchange)
        async for event in inner(conversation, caller):
            if isinstance(event, TurnDone):
                exchange.turn = event.turn
            yield event

    server.service.answer = answer
    return seen


def tool_results_after(exchanges: list[Exchange], index: int) -> dict[str, str]:
    """The tool results (call id -> text) that the request after `exchanges[index]` sent back for
    the calls that answer made, in the one conversation shape (whichever wire carried them)."""
    calls = {c.id for c in exchanges[index].turn.tool_calls}
    messages = exchanges[index + 1].conversation.messages
    return {
        m["tool_call_id"]: m["content"]
        for m in messages
        if m["role"] == "tool" and m.get("tool_call_id") in calls
    }


def samples(groups: list[dict]) -> list[tuple[dict, int]]:
    return [(g, s) for g in groups for s in range(len(g["tokens"]))]


def untrained_ids(groups: list[dict], generations) -> list[str]:
    """Samples that hold a trained token the policy did not sample: each sample's unmasked ids must be
    exactly one turn's span, and (prompt, span) exactly one vLLM call's (prompt ids, sampled ids), with
    its logprobs. Empty when every trained token is the policy's own."""
    from hermes_opd.contract.constants import MASKED

    sampled = {(tuple(p), tuple(i)): lps for p, i, lps in generations}
    bad = []
    for group, seq in samples(groups):
        tokens, masks = group["tokens"][seq], group["masks"][seq]
        where = group["overrides"][seq]["proxy"]
        spans = group["overrides"][seq]["turn_spans"]
        if len(spans) != 1:
            bad.append(f"{where}: {len(spans)} turn spans")
            continue
        start, end = spans[0]
        key = (tuple(tokens[:start]), tuple(tokens[start:end]))
        if key not in sampled:
            bad.append(f"{where}: its span is no generation vLLM made for that prompt")
        elif group["inference_logprobs"][seq][start:end] != sampled[key]:
            bad.append(f"{where}: logprobs differ from vLLM's")
        if [i for i, m in enumerate(masks) if m != MASKED] != list(range(start, end)):
            bad.append(f"{where}: unmasked positions outside the turn's span")
    return bad


def validated(path: Path):
    """`hermes-opd validate PATH` (its exit code must be 0) and its report (scored positions, turns)."""
    from hermes_opd.commands.validate import main as validate_main
    from hermes_opd.commands.validate import validate_jsonl

    report = validate_jsonl(path)
    assert validate_main([str(path)]) == 0, report.to_dict()
    return report


def opd_turns(groups: list[dict]) -> list[dict]:
    return [t for g in groups for o in g["overrides"] for t in o["opd"]["turns"]]
