"""Soak: the demo config (configs/local-cpu.yaml) against a running dev vLLM, with `--concurrency`
rollouts in flight for `--minutes`, sampling resources every `--sample-s` seconds into a JSON report.

    python -m tests.support.soak --minutes 30 --concurrency 32 [--server-url http://127.0.0.1:8123/v1]
    pytest tests/support/soak.py -m slow       # a 2-minute run with assertions (not part of CI)

Each sample: RSS and peak RSS of this process, open file descriptors (by kind), threads, asyncio
tasks, live child processes and zombies below this process, sandbox directories left on disk,
event-loop lag, and the groups / rollouts / stop reasons / contract violations so far. The report
(written after every sample, so a long run can be read while it goes) ends with a verdict: growth of
RSS and fds between the first sample after warm-up and the last one, zombies, and what is left after
the env is closed (children, sandbox directories), which must be nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import resource
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
DEFAULT_CONFIG = REPO / "configs" / "local-cpu.yaml"


# -- resource sampling ------------------------------------------------------------------------------
def _status_kb(field: str, pid: int | str = "self") -> int:
    with contextlib.suppress(OSError), open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def _process_table() -> dict[int, tuple[int, str]]:
    """pid -> (ppid, state) for every visible process."""
    table: dict[int, tuple[int, str]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
            fields = stat[stat.rfind(b")") + 2 :].split()
            table[int(entry.name)] = (int(fields[1]), fields[0].decode())
    return table


def descendants(pid: int) -> list[tuple[int, str]]:
    """(pid, state) of every process below `pid`."""
    table = _process_table()
    children: dict[int, list[int]] = {}
    for child, (parent, _) in table.items():
        children.setdefault(parent, []).append(child)
    found, frontier = [], [pid]
    while frontier:
        nxt = [c for p in frontier for c in children.get(p, [])]
        found.extend((c, table[c][1]) for c in nxt)
        frontier = nxt
    return found


def open_fds() -> dict[str, int]:
    kinds: Counter[str] = Counter()
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        kind = target.split(":", 1)[0] if ":" in target and not target.startswith("/") else "file"
        kinds[kind] += 1
    return {"total": sum(kinds.values()), **dict(sorted(kinds.items()))}


def sandbox_dirs(root: Path) -> int:
    return sum(1 for p in root.glob("hermes-sbx-*")) if root.exists() else 0


# -- the run ------------------------------------------------------------------------------------------
class Soak:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.started = time.monotonic()
        self.samples: list[dict[str, Any]] = []
        self.groups = 0
        self.rollouts = 0
        self.failed_groups: list[str] = []
        self.stops: Counter[str] = Counter()
        self.turn_statuses: Counter[str] = Counter()
        self.violations = 0
        self.group_seconds: list[float] = []
        self.loop_lag_max = 0.0
        self.children_max = 0
        self.zombies_max = 0
        self.scripted_turns = 0
        self.sandbox_root = Path(tempfile.mkdtemp(prefix="hermes-soak-sbx-"))
        os.chmod(self.sandbox_root, 0o755)  # the sandbox user must reach its directory below
        self.report_path = Path(args.out)
        self.report_path.parent.mkdir(parents=True, exist_ok=True)

    def build_env(self):
        from environments.atropos.agentic_opd_env import AgenticOPDEnv
        from environments.atropos.config_loading import Overrides, load_job_config

        overrides = Overrides(
            env={
                "sandbox_root": str(self.sandbox_root),
                "data_path_to_save_groups": "null",
                "metrics_path": str(self.report_path.with_suffix(".metrics.jsonl")),
                "tokenizer_name": self.args.model_dir,
            },
            openai={
                None: {
                    "base_url": self.args.server_url,
                    "model_name": self.args.model_name,
                    "tokenizer_name": self.args.model_dir,
                }
            },
        )
        job = load_job_config(self.args.config, overrides, env_cls=AgenticOPDEnv)
        self.group_size = job.env.group_size
        self.config_summary = {
            "config": str(self.args.config),
            "server_url": self.args.server_url,
            **{
                k: getattr(job.env, k)
                for k in (
                    "group_size",
                    "max_turns",
                    "max_token_length",
                    "opd_enabled",
                    "judge_backend",
                    "distill_topk",
                )
            },
        }
        env = AgenticOPDEnv(job.env, list(job.servers))
        if self.args.scripted_tool_rate > 0:
            self.script_tools(env)
        return env

    def script_tools(self, env) -> None:
        """The random dev model almost never emits a tool call, so the sandbox would sit idle: with
        probability `--scripted-tool-rate`, a rollout's first turn is replaced by a terminal call that
        writes and runs solution.py and leaves a background process behind (later turns, the judge
        and the teacher stay real). Those ids are recorded like any generation."""
        import random

        from hermes_opd.vllm_api.wire_format import GeneratedSequence

        tok = env.tokenizer
        command = (
            "printf 'def f():\\n    return 1\\n' > solution.py && python3 -c 'import solution; print(solution.f())' "
            "&& (sleep 30 &) && ls -la"
        )
        call = json.dumps({"name": "terminal", "arguments": {"command": command}})
        ids = tok.encode(f"<tool_call>{call}</tool_call>", add_special_tokens=False) + [tok.eos_token_id]
        rng = random.Random(0)
        original = env._sampler

        def sampler(temperature: float, eval_mode: bool):
            inner = original(temperature, eval_mode)
            first_len: dict[str, int] = {}

            async def sample(context: list[int], max_tokens: int) -> GeneratedSequence:
                first = first_len.setdefault("n", len(context)) == len(context)
                if first and rng.random() < self.args.scripted_tool_rate and len(ids) <= max_tokens:
                    self.scripted_turns += 1
                    return GeneratedSequence(list(ids), [-0.5] * len(ids), "stop", "")
                return await inner(context, max_tokens)

            return sample

        env._sampler = sampler

    def sample(self, phase: str) -> dict[str, Any]:
        kids = descendants(os.getpid())
        record = {
            "t_s": round(time.monotonic() - self.started, 1),
            "phase": phase,
            "rss_mb": round(_status_kb("VmRSS") / 1024, 1),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "fds": open_fds(),
            "threads": threading.active_count(),
            "os_threads": _status_kb("Threads"),
            "asyncio_tasks": len(asyncio.all_tasks()) if _running_loop() else 0,
            "children": sum(1 for _, state in kids if state != "Z"),
            "zombies": sum(1 for _, state in kids if state == "Z"),
            "children_max_1s": self.children_max,
            "zombies_max_1s": self.zombies_max,
            "sandbox_dirs": sandbox_dirs(self.sandbox_root),
            "loop_lag_max_s": round(self.loop_lag_max, 3),
            "groups": self.groups,
            "rollouts": self.rollouts,
            "failed_groups": len(self.failed_groups),
            "violations": self.violations,
        }
        self.loop_lag_max = 0.0
        self.children_max = self.zombies_max = 0
        self.samples.append(record)
        self.write_report()
        return record

    def write_report(self, final: dict[str, Any] | None = None) -> None:
        report = {
            "args": {k: str(v) for k, v in vars(self.args).items()},
            "setup": getattr(self, "config_summary", {}),
            "samples": self.samples,
            "totals": {
                "elapsed_s": round(time.monotonic() - self.started, 1),
                "groups": self.groups,
                "rollouts": self.rollouts,
                "rollouts_per_min": round(
                    self.rollouts / max(1e-9, (time.monotonic() - self.started) / 60), 2
                ),
                "group_s_mean": round(statistics.fmean(self.group_seconds), 2)
                if self.group_seconds
                else None,
                "group_s_max": round(max(self.group_seconds), 2) if self.group_seconds else None,
                "stop_reasons": dict(self.stops),
                "turn_statuses": dict(self.turn_statuses),
                "contract_violations": self.violations,
                "scripted_tool_turns": self.scripted_turns,
                "failed_groups": self.failed_groups[:20],
            },
        }
        if final is not None:
            report["verdict"] = final
        tmp = self.report_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(report, indent=2))
        os.replace(tmp, self.report_path)

    async def worker(self, env, stop_at: float) -> None:
        from hermes_opd.contract.validation import validate_group

        while time.monotonic() < stop_at:
            item = await env.get_next_item()
            t0 = time.monotonic()
            try:
                group, _ = await env.collect_trajectories(item)
            except Exception as exc:  # noqa: BLE001 - counted and reported, the soak goes on
                self.failed_groups.append(f"{item.task_id}: {type(exc).__name__}: {exc}"[:300])
                continue
            self.group_seconds.append(time.monotonic() - t0)
            self.groups += 1
            self.rollouts += len(group["tokens"])
            self.violations += len(validate_group(group))
            for override in group["overrides"]:
                self.stops[override["stop_reason"]] += 1
                for turn in override.get("opd", {}).get("turns", []):
                    self.turn_statuses[turn["status"]] += 1

    async def lag_probe(self) -> None:
        """Event-loop lag every 0.1 s; live children and zombies below this process every second."""
        ticks = 0
        while True:
            t0 = time.monotonic()
            await asyncio.sleep(0.1)
            self.loop_lag_max = max(self.loop_lag_max, time.monotonic() - t0 - 0.1)
            ticks += 1
            if ticks % 10 == 0:
                kids = descendants(os.getpid())
                self.children_max = max(self.children_max, sum(1 for _, s in kids if s != "Z"))
                self.zombies_max = max(self.zombies_max, sum(1 for _, s in kids if s == "Z"))

    async def run(self) -> dict[str, Any]:
        env = self.build_env()
        await env.setup()
        self.sample("start")
        workers_n = max(1, self.args.concurrency // self.group_size)
        stop_at = time.monotonic() + self.args.minutes * 60
        lag = asyncio.create_task(self.lag_probe())
        workers = [asyncio.create_task(self.worker(env, stop_at)) for _ in range(workers_n)]
        try:
            while time.monotonic() < stop_at:
                await asyncio.sleep(min(self.args.sample_s, max(0.0, stop_at - time.monotonic())))
                self.sample("run")
            # Drain: groups in flight finish (bounded), then everything is closed.
            done, pending = await asyncio.wait(workers, timeout=self.args.drain_s)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            self.sample("drained")
        finally:
            lag.cancel()
            for task in workers:
                task.cancel()
            await asyncio.gather(lag, *workers, return_exceptions=True)
            await env.close()
        await asyncio.sleep(1.0)
        after = self.sample("closed")
        return self.verdict(after, cancelled=len(pending))

    def verdict(self, after: dict[str, Any], cancelled: int) -> dict[str, Any]:
        run = [s for s in self.samples if s["phase"] == "run"]
        warm = run[1:] or run or self.samples  # the first minute loads caches and pools
        first, last = warm[0], warm[-1]
        verdict = {
            "rss_growth_mb": round(last["rss_mb"] - first["rss_mb"], 1),
            "fd_growth": last["fds"]["total"] - first["fds"]["total"],
            "max_children": max(max(s["children"], s["children_max_1s"]) for s in self.samples),
            # zombies seen while running are children that exited a moment before asyncio reaped them
            "max_zombies_transient": max(max(s["zombies"], s["zombies_max_1s"]) for s in self.samples),
            "max_loop_lag_s": max(s["loop_lag_max_s"] for s in self.samples),
            "children_after_close": after["children"],
            "zombies_after_close": after["zombies"],
            "sandbox_dirs_after_close": after["sandbox_dirs"],
            "groups_cancelled_at_end": cancelled,
            "contract_violations": self.violations,
            "failed_groups": len(self.failed_groups),
        }
        verdict["ok"] = (
            verdict["children_after_close"] == 0
            and verdict["zombies_after_close"] == 0
            and verdict["sandbox_dirs_after_close"] == 0
            and verdict["contract_violations"] == 0
            and verdict["failed_groups"] == 0
            and self.groups > 0
        )
        self.write_report(verdict)
        return verdict


def _running_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def build_parser() -> argparse.ArgumentParser:
    from environments.atropos.embedded_paths import default_dev_model_dir

    parser = argparse.ArgumentParser(prog="python -m tests.support.soak", description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument(
        "--concurrency", type=int, default=32, help="rollouts in flight (groups x group_size)"
    )
    parser.add_argument("--sample-s", type=float, default=30.0)
    parser.add_argument(
        "--scripted-tool-rate",
        type=float,
        default=0.5,
        help="share of rollouts whose first turn is a scripted terminal call (0: the policy only)",
    )
    parser.add_argument("--drain-s", type=float, default=300.0, help="how long in-flight groups may finish")
    parser.add_argument("--config", default=str(DEFAULT_CONFIG))
    parser.add_argument(
        "--server-url", default=os.environ.get("HERMES_OPD_DEV_SERVER_URL", "http://127.0.0.1:8123/v1")
    )
    parser.add_argument("--model-name", default=os.environ.get("HERMES_OPD_DEV_SERVER_MODEL", "dev-model"))
    parser.add_argument("--model-dir", default=str(default_dev_model_dir()))
    parser.add_argument(
        "--out", default=str(REPO / "runs" / "soak" / f"soak-{time.strftime('%Y%m%d-%H%M%S')}.json")
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    soak = Soak(args)
    print(
        f"soak: {args.minutes} min, {args.concurrency} rollouts in flight; report {soak.report_path}",
        flush=True,
    )
    try:
        verdict = asyncio.run(soak.run())
    finally:
        shutil.rmtree(soak.sandbox_root, ignore_errors=True)
    print(json.dumps(verdict, indent=2))
    return 0 if verdict["ok"] else 1


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.reliability
def test_soak_two_minutes(dev_server, tmp_path):
    argv = [
        "--minutes",
        "2",
        "--concurrency",
        "16",
        "--sample-s",
        "20",
        "--out",
        str(tmp_path / "soak.json"),
        "--server-url",
        dev_server.base_url,
        "--model-name",
        dev_server.model_name,
        "--model-dir",
        str(dev_server.model_dir),
    ]
    assert main(argv) == 0
    report = json.loads((tmp_path / "soak.json").read_text())
    verdict = report["verdict"]
    assert verdict["zombies_after_close"] == 0 and verdict["children_after_close"] == 0
    assert verdict["fd_growth"] < 50


if __name__ == "__main__":
    sys.exit(main())
