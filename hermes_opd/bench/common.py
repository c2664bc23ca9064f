"""Shared helpers of the benchmarks: the headline ratio, medians over repeated runs, retries, machine info,
and the flags that several benchmarks share (the dev server's, the `--quick` defaults)."""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import sys
from collections.abc import Awaitable, Callable
from contextlib import suppress
from typing import Any, TypeVar

from hermes_opd.runtime.cli_flags import add_policy_url

T = TypeVar("T")


def add_server_arguments(parser: argparse.ArgumentParser) -> None:
    """`--policy-url` (dest `base_url`; `--base-url` is its old spelling), `--model`, `--tokenizer`:
    the dev vLLM server a benchmark measures against."""
    from environments.atropos.embedded_paths import default_dev_model_dir

    add_policy_url(
        parser,
        "--base-url",
        default="http://127.0.0.1:8123/v1",
        help="dev vLLM server (…/v1)",
        dest="base_url",
    )
    parser.add_argument("--model", default="dev-model", help="served model name")
    parser.add_argument(
        "--tokenizer",
        default=str(default_dev_model_dir()),
        help="tokenizer / model directory (the dev model)",
    )


def server_arguments(args: argparse.Namespace) -> dict[str, str]:
    """What `add_server_arguments` read, as the `base_url`, `model` and `tokenizer_dir` keywords that
    every benchmark's `run` takes."""
    return {"base_url": args.base_url, "model": args.model, "tokenizer_dir": args.tokenizer}


def pick(value: Any, default: Any, quick_default: Any, quick: bool) -> Any:
    """A flag's value: as given, else its `--quick` default under `--quick`, else its default."""
    if value is not None:
        return value
    return quick_default if quick else default


def with_headline(result: dict[str, Any], key: str, value: float) -> dict[str, Any]:
    """`result` with `key: value` moved to the END (the headline ratio, larger is better)."""
    out = {k: v for k, v in result.items() if k != key}
    out[key] = value
    return out


def rounded(value: Any, digits: int = 4) -> Any:
    """Round floats (recursively) for printing; ints, strings and bools are left alone."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            return value
        if value == 0.0:
            return 0.0
        magnitude = math.floor(math.log10(abs(value)))
        return round(value, max(digits - 1 - magnitude, 0))
    if isinstance(value, dict):
        return {k: rounded(v, digits) for k, v in value.items()}
    if isinstance(value, list):
        return [rounded(v, digits) for v in value]
    return value


def median_result(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Element-wise median of several result objects with the same keys, in the first run's key order.

    Numbers get the median (ints stay ints when every run agrees); strings, bools and lists keep the
    first run's value; nested objects are merged recursively. The headline (last key) stays last.
    """
    if len(runs) == 1:
        return runs[0]
    first = runs[0]
    out: dict[str, Any] = {}
    for key, value in first.items():
        values = [run.get(key) for run in runs]
        if isinstance(value, dict):
            out[key] = median_result([v for v in values if isinstance(v, dict)])
        elif isinstance(value, bool) or not isinstance(value, int | float):
            out[key] = value
        else:
            numbers = [float(v) for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
            med = statistics.median(numbers)
            out[key] = int(med) if isinstance(value, int) and all(isinstance(v, int) for v in values) else med
    return out


def machine_info() -> dict[str, Any]:
    """What the figures were measured on."""
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
    }
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    with suppress(OSError):
        info["load_avg_1m"] = os.getloadavg()[0]
    try:
        import torch

        info["torch"] = torch.__version__
    except ImportError:
        pass
    return info


async def with_retries(make_call: Callable[[], Awaitable[T]], attempts: int = 3, delay_s: float = 1.0) -> T:
    """Await `make_call()`, again after a dropped connection (a shared dev server may restart or shed
    load); each attempt is timed on its own by the caller, so a retry never pads a measurement."""
    import aiohttp

    from hermes_opd.vllm_api.retry import RetryPolicy, retrying

    def dropped(exc: BaseException) -> bool:
        if isinstance(exc, aiohttp.ClientConnectionError | aiohttp.ClientPayloadError):
            print(f"[bench] connection problem: {exc}", file=sys.stderr)
            return True
        return False

    return await retrying(make_call, RetryPolicy(attempts, delay_s, delay_s * attempts), dropped)
