"""`hermes-opd bench loss`: top-K reverse-KL forward+backward on CPU, peak memory and time.

Variants, each run in a FRESH subprocess (so that one variant's freed memory or allocator state can
never flatter another's):
- `ours`: the trainer's path: one log_softmax over the vocabulary gathered at [target, top-K ids]
  (`trainer_adapters.student_logprobs.gather_logprobs`), then `trainer_adapters.losses.opd_topk_loss`
  (reverse KL over K+1 bins);
- `k_clones`: the pattern the reference uses (written here, OpenClaw-style): for each of the K teacher
  entries the logits are cloned and log-softmaxed on their own, so K [T, V] tensors stay alive for
  the backward pass; the KL itself is the same `topk_kl`, so only the gathering differs;
- `ce`: plain cross-entropy on the same logits (the floor: one log_softmax, one gather).

Memory: torch has no CPU allocator statistics, so peak memory is the process's peak RSS
(`ru_maxrss`, exact high-water mark) during the first forward+backward minus the RSS just before
it. The inputs (logits [T, V] float32 as a leaf that requires grad, teacher ids/logprobs) are built
without large temporaries, so the high-water mark before the step is the baseline itself (both are
reported). Tensors of this size are mmapped by glibc, so RSS follows live tensors. Time: the median
of `iters` further forward+backward passes (`k_clones`: its first, memory-measured pass only, since
one pass takes about a minute at the default size).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from typing import Any

from hermes_opd.bench.common import machine_info, pick, with_headline

VARIANTS = ("ours", "k_clones", "ce")
SAFETY_MARGIN_BYTES = 3 * 1024**3


def _rss_bytes() -> int:
    with open("/proc/self/statm", encoding="ascii") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def make_inputs(T: int, V: int, K: int, seed: int = 0):
    import torch

    generator = torch.Generator().manual_seed(seed)
    logits_TV = torch.randn(T, V, generator=generator).mul_(2.0).requires_grad_(True)
    targets_T = torch.randint(0, V, (T,), generator=generator)
    stride = max(1, (V - 1) // max(1, K))
    base_T1 = torch.randint(0, V, (T, 1), generator=generator)
    topk_ids_TK = (base_T1 + torch.arange(K) * stride) % V  # K distinct ids per position
    teacher_lps_TK = torch.log_softmax(torch.randn(T, K, generator=generator) * 2.0, dim=-1) - 0.3
    teacher_lps_TK, _ = teacher_lps_TK.sort(dim=-1, descending=True)
    valid_TK = torch.ones(T, K, dtype=torch.bool)
    return logits_TV, targets_T, topk_ids_TK, teacher_lps_TK, valid_TK


def step_ours(logits_TV, targets_T, topk_ids_TK, teacher_lps_TK, valid_TK):
    import torch

    from trainer_adapters.losses import opd_topk_loss
    from trainer_adapters.student_logprobs import gather_logprobs

    index = torch.cat([targets_T.unsqueeze(-1), topk_ids_TK], dim=-1).unsqueeze(0)
    gathered = gather_logprobs(logits_TV.unsqueeze(0), index)
    term = opd_topk_loss(gathered[..., 1:], teacher_lps_TK.unsqueeze(0), valid_TK.unsqueeze(0))
    term.value.backward()
    return term.value.detach()


def step_k_clones(logits_TV, targets_T, topk_ids_TK, teacher_lps_TK, valid_TK):
    import torch

    from trainer_adapters.losses import topk_kl

    columns = []
    for k in range(topk_ids_TK.shape[1]):
        logits_k = logits_TV.clone()  # one clone of the logits per teacher entry
        columns.append(torch.log_softmax(logits_k, dim=-1).gather(-1, topk_ids_TK[:, k : k + 1]))
    student_TK = torch.cat(columns, dim=-1)
    kl_T = topk_kl(student_TK, teacher_lps_TK, valid_TK)
    loss = kl_T.sum() / kl_T.shape[0]
    loss.backward()
    return loss.detach()


def step_ce(logits_TV, targets_T, topk_ids_TK, teacher_lps_TK, valid_TK):
    import torch.nn.functional as F

    loss = F.cross_entropy(logits_TV, targets_T)
    loss.backward()
    return loss.detach()


STEPS = {"ours": step_ours, "k_clones": step_k_clones, "ce": step_ce}


def run_variant(variant: str, T: int, V: int, K: int, iters: int) -> dict[str, Any]:
    """In THIS process (meant to be a fresh one): peak memory of the first step, then timed steps."""
    import gc

    import torch

    torch.manual_seed(0)
    inputs = make_inputs(T, V, K)
    step = STEPS[variant]
    gc.collect()
    baseline = _rss_bytes()
    peak_before = _peak_rss_bytes()
    started = time.perf_counter()
    step(*inputs)
    first_s = time.perf_counter() - started
    peak_after = _peak_rss_bytes()
    times = []
    for _ in range(iters):
        inputs[0].grad = None
        started = time.perf_counter()
        step(*inputs)
        times.append(time.perf_counter() - started)
    return {
        "variant": variant,
        "peak_bytes": max(0, peak_after - baseline),
        "baseline_rss_bytes": baseline,
        "high_water_before_step_bytes": peak_before,
        "first_step_s": first_s,
        "step_s": statistics.median(times) if times else first_s,
        "threads": torch.get_num_threads(),
    }


def run_in_subprocess(
    variant: str, T: int, V: int, K: int, iters: int, timeout_s: float = 1800
) -> dict[str, Any]:
    command = [
        sys.executable,
        "-m",
        "hermes_opd.bench.loss_bench",
        "--variant",
        variant,
        "--T",
        str(T),
        "--V",
        str(V),
        "--K",
        str(K),
        "--iters",
        str(iters),
    ]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False)
    if completed.returncode != 0:
        raise RuntimeError(
            f"loss variant {variant} failed ({completed.returncode}): {completed.stderr[-2000:]}"
        )
    return json.loads(completed.stdout.strip().splitlines()[-1])


def _available_bytes() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def run(T: int, V: int, K: int, iters: int) -> dict[str, Any]:
    tensor_bytes = T * V * 4
    results: dict[str, Any] = {}
    for variant in ("ce", "ours"):
        results[variant] = run_in_subprocess(variant, T, V, K, iters)
    # K-clones keeps K [T, V] tensors alive: refuse to push a shared machine into the OOM killer.
    need = (K + 3) * tensor_bytes + SAFETY_MARGIN_BYTES
    available = _available_bytes()
    if available is not None and need > available:
        raise RuntimeError(
            f"k_clones needs about {need / 2**30:.1f} GiB and only {available / 2**30:.1f} GiB are available; "
            "rerun with a smaller --T/--V/--K or when the machine is less busy"
        )
    # One step only: it takes about a minute at the default size, and since every [T, V] clone is a
    # fresh mmap (glibc maps allocations this large and unmaps them on free), later steps pay the same
    # page faults as the first.
    results["k_clones"] = run_in_subprocess("k_clones", T, V, K, 0)
    ours, ce, clones = results["ours"], results["ce"], results["k_clones"]
    result: dict[str, Any] = {
        "bench": "loss",
        "T": T,
        "V": V,
        "K": K,
        "logits_mib": tensor_bytes / 2**20,
        "iters": iters,
        "peak_mib_ce": ce["peak_bytes"] / 2**20,
        "peak_mib_ours": ours["peak_bytes"] / 2**20,
        "peak_mib_k_clones": clones["peak_bytes"] / 2**20,
        "step_s_ce": ce["step_s"],
        "step_s_ours": ours["step_s"],
        "step_s_k_clones": clones["step_s"],
        "ours_peak_over_ce": ours["peak_bytes"] / ce["peak_bytes"],
        "ours_time_over_ce": ours["step_s"] / ce["step_s"],
        "k_clones_time_over_ours": clones["step_s"] / ours["step_s"],
        "variants": results,
        "machine": machine_info(),
    }
    return with_headline(result, "k_clones_peak_over_ours", clones["peak_bytes"] / ours["peak_bytes"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="one loss variant in this process (used by `bench loss`)")
    parser.add_argument("--variant", choices=VARIANTS, required=True)
    parser.add_argument("--T", type=int, default=1024)
    parser.add_argument("--V", type=int, default=32000)
    parser.add_argument("--K", type=int, default=50)
    parser.add_argument("--iters", type=int, default=3)
    args = parser.parse_args(argv)
    print(json.dumps(run_variant(args.variant, args.T, args.V, args.K, args.iters)))
    return 0


if __name__ == "__main__":
    sys.exit(main())


# -- `hermes-opd bench loss` (hermes_opd/bench/cli.py) ----------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--T", type=int, default=None, help="positions (default 1024; quick 128)")
    parser.add_argument("--V", type=int, default=None, help="vocabulary (default 32000; quick 4000)")
    parser.add_argument("--K", type=int, default=None, help="teacher top-K (default 50; quick 8)")
    parser.add_argument("--iters", type=int, default=None, help="timed iterations per variant (default 3)")


def run_bench(args: argparse.Namespace) -> dict[str, Any]:
    q = args.quick
    return run(
        T=pick(args.T, 1024, 128, q),
        V=pick(args.V, 32000, 4000, q),
        K=pick(args.K, 50, 8, q),
        iters=pick(args.iters, 3, 1, q),
    )
