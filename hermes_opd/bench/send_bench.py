"""`hermes-opd bench send`: throughput of `hermes-opd send`, and the Atropos API's resident memory while
a file of ten trainer batches is replayed with and without pacing.

Real parts: atroposlib's `run-api` (a fresh process per measurement, so that its resident memory
starts from the same point), `hermes-opd send` itself (a child process; its groups per second are
those its summary reports, start-up excluded), and a
trainer stand-in that registers and pulls one batch every `step_s` seconds (a trainer's pace; it
does not train, so that the API and the sender are what is measured). The groups are a real file
(`--groups`, e.g. one written by `hermes-opd process`), cycled up to ten batches.

Modes, each against a fresh API (groups per second: from the sender's start to its end, waiting for
the trainer to take the queue included, except in `throughput`, which does not wait: `--no-drain`):
- `throughput`: no pacing, a trainer that pulls as fast as it can: groups per second of `send`;
- `unpaced`: `--max-queue-batches 0`, no rate limit, a trainer four times slower than that throughput
  (`--step-s` sets its seconds per batch instead): the file piles up in the API;
- `max_rate`: `--max-rate` set to the trainer's pace (groups per second), queue bound off;
- `queue_bound`: the default (`--max-queue-batches 2`), no rate limit.
The API's resident memory (VmRSS of its process tree, sampled every 20 ms) is reported as the peak
above its idle level. The headline is unpaced growth / queue-bound growth.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from hermes_opd.bench.common import machine_info, pick, rounded, with_headline
from hermes_opd.devkit.run_api import RunApi


def _rss_kib(pid: int) -> int:
    """VmRSS of `pid` and its descendants, in KiB (0 when gone)."""
    total = 0
    stack = [pid]
    while stack:
        current = stack.pop()
        with contextlib.suppress(OSError, ValueError):
            for line in Path(f"/proc/{current}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
            for task in Path(f"/proc/{current}/task").iterdir():
                stack.extend(int(c) for c in (task / "children").read_text().split())
    return total


class _Puller(threading.Thread):
    """Registers, then takes one batch every `step_s` seconds until stopped."""

    def __init__(self, url: str, batch_size: int, step_s: float) -> None:
        super().__init__(daemon=True)
        self.url, self.batch_size, self.step_s = url, batch_size, step_s
        self.stopping = threading.Event()
        self.batches = 0

    def run(self) -> None:
        registration = {
            "wandb_group": "bench",
            "wandb_project": "bench",
            "batch_size": self.batch_size,
            "max_token_len": 1 << 20,
            "checkpoint_dir": "/tmp/unused",
            "save_checkpoint_interval": 0,
            "starting_step": 0,
            "num_steps": 1 << 30,
        }
        with httpx.Client(base_url=self.url, timeout=30) as http:
            http.post("/register", json=registration).raise_for_status()
            while not self.stopping.is_set():
                if http.get("/batch").json().get("batch"):
                    self.batches += 1
                    self.stopping.wait(self.step_s)
                else:
                    self.stopping.wait(0.01)


class _Sampler(threading.Thread):
    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.peak = 0
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            self.peak = max(self.peak, _rss_kib(self.pid))
            self.stopping.wait(0.02)


def _write_replay_file(source: Path, target: Path, groups: int) -> tuple[int, int]:
    """`groups` lines cycled from `source`; returns (groups, bytes)."""
    lines = [line for line in source.read_bytes().splitlines() if line.strip()]
    if not lines:
        raise ValueError(f"{source} holds no groups")
    with target.open("wb") as handle:
        for line in itertools.islice(itertools.cycle(lines), groups):
            handle.write(line + b"\n")
    return groups, target.stat().st_size


SUMMARY = re.compile(r"send complete: (\d+) group\(s\).* \(([\d.]+) groups/s\)")


def _send(path: Path, url: str, flags: list[str]) -> tuple[int, float]:
    """Run `hermes-opd send`; (groups acknowledged, groups per second) from its summary."""
    argv = [
        sys.executable,
        "-m",
        "hermes_opd.commands.main",
        "send",
        str(path),
        "--api",
        url,
        "--progress",
        "none",
        *flags,
    ]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=1800)
    match = SUMMARY.search(proc.stdout)
    if proc.returncode != 0 or match is None:
        raise RuntimeError(
            f"hermes-opd send failed ({proc.returncode}): {proc.stdout[-1000:]} {proc.stderr[-1000:]}"
        )
    return int(match.group(1)), float(match.group(2))


def _measure(workdir: Path, path: Path, batch_size: int, step_s: float, flags: list[str]) -> dict[str, Any]:
    for name in (path.name + ".cursor",):
        with contextlib.suppress(FileNotFoundError):
            (path.parent / name).unlink()
    api = RunApi(log_path=str(workdir / "api.log")).start()
    puller = _Puller(api.url, batch_size, step_s)
    sampler = _Sampler(api.process.pid)
    try:
        puller.start()
        while httpx.get(api.url + "/info", timeout=5).json().get("batch_size") != batch_size:
            time.sleep(0.05)
        idle = _rss_kib(api.process.pid)
        sampler.start()
        groups, groups_per_s = _send(path, api.url, flags)
    finally:
        sampler.stopping.set()
        puller.stopping.set()
        sampler.join(5)
        puller.join(5)
        api.stop()
    return {
        "groups": groups,
        "groups_per_s": groups_per_s,
        "api_rss_idle_mib": idle / 1024,
        "api_rss_peak_mib": sampler.peak / 1024,
        "api_rss_growth_mib": max(sampler.peak - idle, 0) / 1024,
    }


def run(
    groups_path: str, batch_size: int = 8, step_s: float | None = None, slowdown: float = 4.0
) -> dict[str, Any]:
    """`step_s` None: a trainer `slowdown` times slower than the measured throughput of `send`, so
    that an unpaced sender outruns it on any machine (what pacing is for)."""
    source = Path(groups_path)
    first = json.loads(next(line for line in source.read_bytes().splitlines() if line.strip()))
    group_size = len(first.get("tokens") or first["group"]["tokens"])
    if batch_size % group_size:
        raise ValueError(f"--batch-size {batch_size} is not a multiple of the file's group size {group_size}")
    batch_groups = batch_size // group_size
    workdir = Path(os.environ.get("TMPDIR", "/tmp")) / f"hermes-opd-send-bench-{os.getpid()}"
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "replay.jsonl"
    groups, size = _write_replay_file(source, path, 10 * batch_groups)
    print(
        f"send bench: {groups} groups ({size / 2**20:.1f} MiB) = ten batches of {batch_size} sequences",
        file=sys.stderr,
    )
    result: dict[str, Any] = {
        "bench": "send",
        "machine": machine_info(),
        "groups": groups,
        "file_mib": size / 2**20,
        "batch_size": batch_size,
    }

    def measure(mode: str, mode_step: float, flags: list[str]) -> None:
        measured = _measure(workdir, path, batch_size, mode_step, flags)
        result[mode] = rounded(measured)
        print(
            f"  {mode:12s} {measured['groups_per_s']:7.2f} groups/s  API RSS idle "
            f"{measured['api_rss_idle_mib']:.0f} MiB, peak {measured['api_rss_peak_mib']:.0f} MiB "
            f"(+{measured['api_rss_growth_mib']:.1f})",
            file=sys.stderr,
        )

    measure("throughput", 0.0, ["--max-queue-batches", "0", "--no-drain"])
    if step_s is None:
        step_s = batch_groups * slowdown / max(result["throughput"]["groups_per_s"], 1e-3)
    pace = batch_groups / step_s  # groups per second the slow trainer takes
    result["trainer_step_s"] = rounded(step_s)
    result["trainer_groups_per_s"] = rounded(pace)
    print(
        f"  trainer pace for the next modes: {step_s:.2f} s per batch = {pace:.2f} groups/s", file=sys.stderr
    )
    measure("unpaced", step_s, ["--max-queue-batches", "0"])
    measure("max_rate", step_s, ["--max-queue-batches", "0", "--max-rate", f"{pace:.4g}"])
    measure("queue_bound", step_s, [])
    with contextlib.suppress(OSError):
        for leftover in workdir.iterdir():
            leftover.unlink()
        workdir.rmdir()
    growth = result["queue_bound"]["api_rss_growth_mib"]
    ratio = result["unpaced"]["api_rss_growth_mib"] / growth if growth > 0 else float("inf")
    return with_headline(result, "unpaced_over_queue_bound_rss_growth", round(ratio, 2))


# -- `hermes-opd bench send` (hermes_opd/bench/cli.py) ----------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--groups", required=True, help="groups JSONL to replay (cycled up to ten batches)")
    parser.add_argument("--batch-size", type=int, default=None, help="trainer batch in sequences (default 8)")
    parser.add_argument(
        "--step-s",
        type=float,
        default=None,
        help="the slow trainer's seconds per batch (default: 4x slower than send's throughput)",
    )


def run_bench(args: argparse.Namespace) -> dict[str, Any]:
    return run(args.groups, batch_size=pick(args.batch_size, 8, 4, args.quick), step_s=args.step_s)
