"""Sandbox command overhead: the allow-list root built by the root-side shell script (before) and by
bubblewrap (after), measured in one run, interleaved, so both see the same machine load.

Each sample is one `Sandbox.run("true")` (start, namespaces, root, privilege drop, the command, exit
and reaping), after two warm-up commands per builder. Reported per builder: median and p95 in
milliseconds; the headline is the shell median over the bubblewrap median (larger is better).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

from environments.rollout.sandbox.limits import SandboxLimits
from environments.rollout.sandbox.sandbox import Sandbox
from hermes_opd.bench.common import pick

BUILDERS = ("shell", "bwrap")
_WARM_UP = 2


def _p95(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


async def run(commands: int) -> dict[str, Any]:
    """Median and p95 of `commands` commands per root builder, interleaved."""
    samples: dict[str, list[float]] = {b: [] for b in BUILDERS}
    async with (
        Sandbox.create(SandboxLimits(root_builder="shell")) as shell,
        Sandbox.create(SandboxLimits(root_builder="bwrap")) as bwrap,
    ):
        sandboxes = {"shell": shell, "bwrap": bwrap}
        if not bwrap.isolation.bwrap_path or not shell.isolation.private_root:
            raise SystemExit(
                "the sandbox bench needs root, an allow-list root and bubblewrap (bwrap) installed"
            )
        for i in range(_WARM_UP + commands):
            for builder in BUILDERS if i % 2 == 0 else reversed(BUILDERS):
                started = time.perf_counter()
                result = await sandboxes[builder].run("true")
                elapsed = time.perf_counter() - started
                if result.exit_code != 0:
                    raise RuntimeError(f"{builder}: `true` failed: {result.output[-300:]}")
                if i >= _WARM_UP:
                    samples[builder].append(elapsed * 1000)
    out: dict[str, Any] = {"bench": "sandbox", "commands_per_builder": commands}
    for builder in BUILDERS:
        out[builder] = {
            "median_ms": statistics.median(samples[builder]),
            "p95_ms": _p95(samples[builder]),
            "min_ms": min(samples[builder]),
        }
    out["shell_over_bwrap_median"] = out["shell"]["median_ms"] / out["bwrap"]["median_ms"]
    return out


def run_sync(commands: int) -> dict[str, Any]:
    return asyncio.run(run(commands))


# -- `hermes-opd bench sandbox` (hermes_opd/bench/cli.py) -------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--commands", type=int, default=None, help="commands per builder (default 100; quick 10)"
    )


def run_bench(args: argparse.Namespace) -> dict[str, Any]:
    return run_sync(pick(args.commands, 100, 10, args.quick))
