"""`hermes-opd bench pipeline`: the reference's OPD schedule against ours, on the same groups and endpoints.

For each teacher back-end (`remote`: a local endpoint in vLLM's exact format answering after a
fixed latency with high parallelism; `real`: the dev vLLM server, compute-bound) it runs:
1. a teacher probe: every teacher request of the group sent raw (HTTP only, body read, not parsed),
   first one at a time (each request's service time; their sum S), then all at once (wall C). The
   teacher's measured parallelism is P = S / C;
2. the reference schedule (`reference_schedule.py`) once the whole group has finished generating;
3. our `OPDPipeline` with every rollout finished at once (the OPD phase alone, worst-case contention);
4. our pipeline as the env runs it: each rollout's OPD starts when that rollout finishes.
Rollout completion is modelled: rollout i of n finishes at gen_time * (0.5 + 0.5 * i / (n - 1)).

The judge is a local OpenAI-compatible endpoint with a fixed latency (`fake_endpoints.py`) that
always votes +1 with a hint, so every turn is judged AND scored. Lower bound of the OPD phase:
max(longest single judge-then-teacher chain, S / P), with a chain = the median judge time of one turn
in the reference run (isolated) + the turn's teacher service time from the probe. Our client's parsing is NOT part of the
bound, so time spent parsing shows up as distance from it. `lower_bound_at_limits_s` is the same
with the configured `judge_concurrency` / teacher `concurrency` (`bound_at_limits`): what a schedule
with zero client CPU could reach under those limits, so the two ratios separate "client CPU" from
"concurrency limits".
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from environments.atropos.embedded_paths import default_dev_model_dir
from environments.pipeline.build import build_opd_pipeline
from environments.pipeline.opd_config import OPDConfig, TeacherConfig
from environments.pipeline.opd_pipeline import OPDPipeline
from hermes_opd.bench.client_cpu import client_cpu_per_turn
from hermes_opd.bench.common import add_server_arguments, machine_info, pick, with_headline, with_retries
from hermes_opd.bench.reference_schedule import reference_process_group
from hermes_opd.bench.synth import SynthSpec, synth_group
from hermes_opd.devkit.fake_endpoints import DEFAULT_HINT, FakeEndpoints, FakeSettings
from hermes_opd.record.hint_splice import build_canonical_teacher_input, tokenizer_codec
from hermes_opd.record.trajectory import Trajectory
from hermes_opd.record.turn_pairs import extract_turn_pairs
from hermes_opd.runtime.process_tuning import freeze_startup_heap
from hermes_opd.vllm_api.endpoint import Endpoint
from judge.config import JudgeConfig

BACKENDS = ("remote", "real")


@dataclass
class PipelineBenchConfig:
    spec: SynthSpec = field(default_factory=SynthSpec)
    backends: tuple[str, ...] = BACKENDS
    tokenizer_dir: str = str(default_dev_model_dir())
    real_base_url: str = "http://127.0.0.1:8123/v1"
    real_model: str = "dev-model"
    judge_latency_s: float = 0.3
    teacher_latency_s: float = 0.15
    gen_time_s: float = 10.0
    k: int = 50
    judge_m: int = 3
    judge_concurrency: int = OPDConfig().judge_concurrency
    teacher_concurrency: int = TeacherConfig().concurrency
    teacher_positions: int = TeacherConfig().max_positions_in_flight
    """The teacher's budget of prompt positions in flight; the group's 32 inputs (~20k positions)
    fit in the default, so `bound_at_limits` counts requests only."""
    teacher_timeout_s: float = 300.0
    real_teacher_path: str = "completions"
    """Teacher path of both schedules against the real server; the teacher probe (the bound) sends
    `/v1/completions` requests, so the bound holds for this path (`bench teacher-scaling` compares
    the paths). The remote-like fake is always scored through `completions`."""


def _progress(message: str) -> None:
    print(f"[bench pipeline] {message}", file=sys.stderr, flush=True)


def finish_times(n: int, gen_time_s: float) -> list[float]:
    """When each rollout of the group finishes generating: spread evenly over [gen/2, gen]."""
    if n == 1:
        return [gen_time_s]
    return [gen_time_s * (0.5 + 0.5 * i / (n - 1)) for i in range(n)]


@dataclass(frozen=True)
class TeacherRequest:
    sequence: int
    turn: int
    ids: list[int]
    prompt_len: int


def teacher_inputs(trajectories: list[Trajectory], tokenizer: Any, hint: str) -> list[TeacherRequest]:
    """Every judged turn's teacher input, with the hint the fake judge gives."""
    codec = tokenizer_codec(tokenizer)
    out = []
    for seq, trajectory in enumerate(trajectories):
        for pair in extract_turn_pairs(trajectory):
            if pair.has_next_state and len(pair.span):
                built = build_canonical_teacher_input(trajectory, pair.span, hint, tokenizer, codec)
                out.append(TeacherRequest(seq, pair.turn_index, built.ids, built.prompt_len))
    return out


async def probe_teacher(base_url: str, model: str, inputs: list[list[int]], k: int) -> dict[str, Any]:
    """Raw service times: each request alone (sequentially), then all of them at once."""
    url = base_url.rstrip("/") + "/completions"

    async def one(session: aiohttp.ClientSession, ids: list[int]) -> tuple[float, int]:
        return await with_retries(lambda: one_attempt(session, ids))

    async def one_attempt(session: aiohttp.ClientSession, ids: list[int]) -> tuple[float, int]:
        payload = {"model": model, "prompt": ids, "max_tokens": 1, "temperature": 0.0, "prompt_logprobs": k}
        started = time.perf_counter()
        async with session.post(
            url, data=json.dumps(payload), headers={"Content-Type": "application/json"}
        ) as r:
            body = await r.read()
            if r.status != 200:
                raise RuntimeError(f"teacher probe: {r.status} {body[:200]!r}")
        return time.perf_counter() - started, len(body)

    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(
        timeout=timeout, connector=aiohttp.TCPConnector(limit=512, keepalive_timeout=4)
    ) as session:
        await one(session, inputs[0])  # warm-up (connection, server's first request)
        sequential = [await one(session, ids) for ids in inputs]
        started = time.perf_counter()
        await asyncio.gather(*(one(session, ids) for ids in inputs))
        concurrent_s = time.perf_counter() - started
    service = [s for s, _ in sequential]
    total = sum(service)
    return {
        "service_s": service,
        "bytes": [b for _, b in sequential],
        "total_s": total,
        "concurrent_s": concurrent_s,
        "parallelism": total / concurrent_s if concurrent_s > 0 else float("inf"),
    }


class _Backend:
    """The objects one run needs, built fresh for each schedule (same endpoints): the pipeline the
    env would build from the same config (environments/pipeline/build.py), and its parts."""

    def __init__(self, opd_config: OPDConfig, pipeline: OPDPipeline) -> None:
        self.opd_config = opd_config
        self.judge_config = opd_config.judge
        self.pipeline = pipeline
        self.judge = pipeline.judge
        self.teacher = pipeline.teacher

    async def warm_up(self, pair: Any, request: TeacherRequest) -> None:
        """Open connections, pay first-request costs outside the timed part (the teacher's path was
        chosen when the pipeline was built)."""
        await self.judge.collect_votes(pair)
        await self.teacher.score_turn(request.ids, request.prompt_len, request.ids[request.prompt_len :])

    async def aclose(self) -> None:
        await self.pipeline.aclose()


def bench_opd_config(
    cfg: PipelineBenchConfig, judge_url: str, teacher_url: str, teacher_model: str, path: str
) -> OPDConfig:
    """The bench's OPD config: the llm judge at `judge_url` (m votes, no turn deadline), the teacher
    at `teacher_url` on `path`, the configured limits. The tokenizer check is off: the fake teacher
    has no `/tokenize` route, and the synthetic groups use the teacher's own tokenizer."""
    judge = JudgeConfig(
        base_url=judge_url, model="fake-judge", m=cfg.judge_m, timeout_s=120.0, turn_deadline_s=None
    )
    teacher = TeacherConfig(
        base_url=teacher_url,
        model=teacher_model,
        concurrency=cfg.teacher_concurrency,
        max_positions_in_flight=cfg.teacher_positions,
        timeout_s=cfg.teacher_timeout_s,
        check_tokenizer=False,
        path=path,
    )
    return OPDConfig(
        distill_topk=cfg.k, judge_concurrency=cfg.judge_concurrency, judge=judge, teacher=teacher
    )


async def build_backend(
    cfg: PipelineBenchConfig,
    tokenizer: Any,
    judge_url: str,
    teacher_url: str,
    teacher_model: str,
    path: str,
    *,
    distill_mode: str = "topk",
) -> _Backend:
    """A fresh pipeline and its parts, through the one constructor (`build_opd_pipeline`)."""
    opd = bench_opd_config(cfg, judge_url, teacher_url, teacher_model, path)
    opd = opd.model_copy(update={"distill_mode": distill_mode})
    pipeline = await build_opd_pipeline(
        tokenizer, opd, Endpoint(teacher_url, teacher_model), Endpoint(judge_url, "fake-judge")
    )
    return _Backend(opd, pipeline)


async def run_backend(
    name: str, cfg: PipelineBenchConfig, trajectories: list[Trajectory], tokenizer: Any, fake: FakeEndpoints
) -> dict[str, Any]:
    remote = name == "remote"
    teacher_url = fake.base_url if remote else cfg.real_base_url
    teacher_model = "fake-teacher" if remote else cfg.real_model
    judge_url = fake.base_url
    requests = teacher_inputs(trajectories, tokenizer, DEFAULT_HINT)
    warm_pair = next(p for p in extract_turn_pairs(trajectories[0]) if p.has_next_state)
    warm_request = requests[0]
    probe = await probe_teacher(teacher_url, teacher_model, [r.ids for r in requests], cfg.k)
    _progress(
        f"{name}: teacher probe: {len(requests)} requests, {probe['total_s']:.2f}s one at a time, "
        f"{probe['concurrent_s']:.2f}s all at once"
    )
    finishes = finish_times(len(trajectories), cfg.gen_time_s)

    async def backend() -> _Backend:
        path = "completions" if remote else cfg.real_teacher_path
        built = await build_backend(cfg, tokenizer, judge_url, teacher_url, teacher_model, path)
        await built.warm_up(warm_pair, warm_request)
        fake.reset_stats()
        return built

    # -- (a) the reference schedule: OPD after the whole group, one turn at a time -----------------
    b = await backend()
    started = time.perf_counter()
    await asyncio.gather(*(asyncio.sleep(t) for t in finishes))
    generated = time.perf_counter()
    cpu = time.process_time()
    reference = await reference_process_group(trajectories, tokenizer, b.judge, b.judge_config, b.teacher)
    ended = time.perf_counter()
    reference_cpu_s = time.process_time() - cpu
    ref_stats = fake.stats()
    await b.aclose()
    reference_opd_s = ended - generated
    reference_group_s = ended - started
    generation_s = generated - started
    _progress(
        f"{name}: reference schedule: OPD {reference_opd_s:.2f}s after {generation_s:.2f}s of generation"
    )

    # -- (b) ours, every rollout finished at once: the OPD phase alone --------------------------------
    b = await backend()
    pipeline = b.pipeline
    started, cpu = time.perf_counter(), time.process_time()
    ours = await asyncio.gather(*(pipeline.process(t) for t in trajectories))
    ours_opd_s = time.perf_counter() - started
    ours_cpu_s = time.process_time() - cpu
    ours_stats = fake.stats()
    await b.aclose()
    _progress(f"{name}: ours, all rollouts finished at once: OPD {ours_opd_s:.2f}s")

    # -- (b') ours as the env runs it: each rollout's OPD starts when it finishes ---------------------
    b = await backend()
    pipeline = b.pipeline

    async def rollout_then_opd(trajectory: Trajectory, finish_s: float):
        await asyncio.sleep(finish_s)
        return await pipeline.process(trajectory)

    started = time.perf_counter()
    await asyncio.gather(*(rollout_then_opd(t, f) for t, f in zip(trajectories, finishes, strict=True)))
    ours_group_s = time.perf_counter() - started
    await b.aclose()
    _progress(f"{name}: ours as the env runs it: group {ours_group_s:.2f}s")

    # -- bounds and checks -------------------------------------------------------------------------
    # Every turn's judge work is the same (m votes against a fixed-latency endpoint), so a chain is the
    # MEDIAN judge time of the reference's (isolated) turns plus that turn's teacher service time;
    # the median keeps one noisy judge call from loosening the bound.
    judge_s = {(t.sequence, t.turn_index): t.judge_s for t in reference.turns}
    judge_median_s = statistics.median(judge_s.values())
    longest_chain_s = judge_median_s + max(probe["service_s"])
    bound_s = max(longest_chain_s, probe["total_s"] / probe["parallelism"])
    limits_bound_s = max(
        bound_s,
        bound_at_limits(judge_median_s, probe["service_s"], cfg.judge_concurrency, cfg.teacher_concurrency),
    )
    scored_ref = sum(1 for t in reference.turns if t.scored)
    scored_ours = sum(1 for d in ours for r in d.turns if r.status == "scored")
    result: dict[str, Any] = {
        "teacher": f"remote-like, {cfg.teacher_latency_s * 1000:.0f} ms latency"
        if remote
        else f"real vLLM at {cfg.real_base_url}",
        "teacher_requests": len(requests),
        "teacher_prompt_tokens_mean": sum(len(r.ids) for r in requests) / len(requests),
        "teacher_body_mb_mean": sum(probe["bytes"]) / len(probe["bytes"]) / 1e6,
        "scored_turns_reference": scored_ref,
        "scored_turns_ours": scored_ours,
        "identical_rows_share": identical_rows_share(reference, ours, trajectories, cfg.k),
        "rows_max_abs_diff": rows_max_abs_diff(reference, ours, cfg.k),
        "teacher_service_s_total": probe["total_s"],
        "teacher_service_s_max": max(probe["service_s"]),
        "teacher_all_at_once_s": probe["concurrent_s"],
        "teacher_parallelism": probe["parallelism"],
        "judge_turn_s_median": judge_median_s,
        "longest_chain_s": longest_chain_s,
        "lower_bound_s": bound_s,
        "reference_opd_s": reference_opd_s,
        "ours_opd_s": ours_opd_s,
        "ours_over_lower_bound": ours_opd_s / bound_s,
        "lower_bound_at_limits_s": limits_bound_s,
        "ours_over_lower_bound_at_limits": ours_opd_s / limits_bound_s,
        "reference_client_cpu_s": reference_cpu_s,
        "ours_client_cpu_s": ours_cpu_s,
    }
    result.update(
        {
            "generation_s": generation_s,
            "reference_group_s": reference_group_s,
            "ours_group_s": ours_group_s,
            "reference_group_over_generation": reference_group_s / generation_s,
            "ours_group_over_generation": ours_group_s / generation_s,
            "judge_max_in_flight_reference": ref_stats["judge"]["max_in_flight"],
            "judge_max_in_flight_ours": ours_stats["judge"]["max_in_flight"],
        }
    )
    if remote:
        result["teacher_max_in_flight_reference"] = ref_stats["teacher"]["max_in_flight"]
        result["teacher_max_in_flight_ours"] = ours_stats["teacher"]["max_in_flight"]
        pairs = [p for t in trajectories for p in extract_turn_pairs(t) if p.has_next_state and len(p.span)]
        judge_config = bench_opd_config(cfg, judge_url, teacher_url, teacher_model, "completions").judge
        result["client_cpu_per_turn"] = await client_cpu_per_turn(
            judge_url, judge_config, pairs, requests, cfg.k
        )
    result["reference_over_ours_opd"] = reference_opd_s / ours_opd_s
    return result


def bound_at_limits(judge_s: float, service_s: list[float], judge_slots: int, teacher_slots: int) -> float:
    """The OPD phase's length under the configured limits with zero client CPU: every turn ready at 0,
    at most `judge_slots` turns judged at once (each `judge_s`), then its teacher request, at most
    `teacher_slots` in flight (request i takes `service_s[i]`), first come first served."""
    import heapq

    judge_free = [0.0] * judge_slots
    judged = []
    for _ in service_s:
        start = heapq.heappop(judge_free)
        heapq.heappush(judge_free, start + judge_s)
        judged.append(start + judge_s)
    teacher_free = [0.0] * teacher_slots
    end = 0.0
    for ready, service in sorted(zip(judged, service_s, strict=True)):
        start = max(ready, heapq.heappop(teacher_free))
        heapq.heappush(teacher_free, start + service)
        end = max(end, start + service)
    return end


def identical_rows_share(reference, ours, trajectories: list[Trajectory], k: int) -> float:
    """Share of scored positions where our top-K row equals the reference's dense row (a sanity check
    that both schedules did the same work; a real CPU server may batch differently and differ in the
    last float bits, see `rows_max_abs_diff`)."""
    return _row_comparison(reference, ours, k)[0]


def rows_max_abs_diff(reference, ours, k: int) -> float:
    """Largest |logprob difference| between our rows and the reference's, over the ids both hold."""
    return _row_comparison(reference, ours, k)[1]


def _row_comparison(reference, ours, k: int) -> tuple[float, float]:
    same = total = 0
    worst = 0.0
    for seq, distill in enumerate(ours):
        for pos, row in enumerate(distill.ids_rows):
            if not row:
                continue
            total += 1
            ids = row[:k] + [0] * (k - len(row[:k]))
            lps = distill.lp_rows[pos][:k] + [0.0] * (k - len(row[:k]))
            ref_ids, ref_lps = reference.token_ids[seq][pos], reference.logprobs[seq][pos]
            same += int(ref_ids == ids and ref_lps == lps)
            theirs = dict(zip(ref_ids, ref_lps, strict=True))
            for tok, lp in zip(row[:k], distill.lp_rows[pos][:k], strict=True):
                if tok in theirs:
                    worst = max(worst, abs(theirs[tok] - lp))
    return (same / total if total else 0.0), worst


async def run(cfg: PipelineBenchConfig) -> dict[str, Any]:
    from transformers import AutoTokenizer

    started = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(cfg.tokenizer_dir)
    trajectories = synth_group(tokenizer, cfg.spec)
    _progress(f"{len(trajectories)} trajectories synthesized in {time.perf_counter() - started:.1f}s")
    # The env freezes its start-up heap after setup (AgenticOPDEnv.setup); this process stands in for it.
    freeze_startup_heap()
    settings = FakeSettings(
        judge_latency_s=cfg.judge_latency_s,
        teacher_latency_s=cfg.teacher_latency_s,
        vocab_size=len(tokenizer),
        tokenizer_dir=cfg.tokenizer_dir,
    )
    result: dict[str, Any] = {
        "bench": "pipeline",
        "config": {
            "rollouts": cfg.spec.rollouts,
            "turns_per_rollout": cfg.spec.turns,
            "sequence_tokens_mean": sum(len(t.tokens) for t in trajectories) / len(trajectories),
            "k": cfg.k,
            "judge_m": cfg.judge_m,
            "judge_latency_s": cfg.judge_latency_s,
            "teacher_latency_s": cfg.teacher_latency_s,
            "gen_time_s": cfg.gen_time_s,
            "judge_concurrency": cfg.judge_concurrency,
            "teacher_concurrency": cfg.teacher_concurrency,
            "real_teacher_path": cfg.real_teacher_path,
        },
        "machine": machine_info(),
    }
    with FakeEndpoints(settings) as fake:
        for name in cfg.backends:
            result[name] = await run_backend(name, cfg, trajectories, tokenizer, fake)
    first = cfg.backends[0]
    return with_headline(result, f"{first}_reference_over_ours_opd", result[first]["reference_over_ours_opd"])


# -- `hermes-opd bench pipeline` (hermes_opd/bench/cli.py) ------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--backend", choices=["remote", "real", "both"], default="both")
    parser.add_argument("--rollouts", type=int, default=None, help="default 8 (quick: 2)")
    parser.add_argument(
        "--turns", type=int, default=None, help="turn pairs per rollout; default 4 (quick: 2)"
    )
    parser.add_argument("--prompt-tokens", type=int, default=None, help="default 256 (quick: 64)")
    parser.add_argument("--turn-tokens", type=int, default=None, help="default 48 (quick: 24)")
    parser.add_argument("--state-tokens", type=int, default=None, help="default 96 (quick: 32)")
    parser.add_argument(
        "--gen-time",
        type=float,
        default=None,
        help="seconds until the last rollout finishes; default 10 (quick: 0.5)",
    )
    parser.add_argument("--judge-latency", type=float, default=0.3)
    parser.add_argument("--teacher-latency", type=float, default=0.15, help="remote-like teacher latency")
    parser.add_argument("--judge-concurrency", type=int, default=None, help="default: OPDConfig's")
    parser.add_argument("--teacher-concurrency", type=int, default=None, help="default: TeacherConfig's")
    parser.add_argument("--k", type=int, default=50)
    add_server_arguments(parser)


def run_bench(args: argparse.Namespace) -> dict[str, Any]:
    q = args.quick
    spec = SynthSpec(
        rollouts=pick(args.rollouts, 8, 2, q),
        turns=pick(args.turns, 4, 2, q),
        prompt_tokens=pick(args.prompt_tokens, 256, 64, q),
        turn_tokens=pick(args.turn_tokens, 48, 24, q),
        state_tokens=pick(args.state_tokens, 96, 32, q),
    )
    cfg = PipelineBenchConfig(
        spec=spec,
        backends=BACKENDS if args.backend == "both" else (args.backend,),
        tokenizer_dir=args.tokenizer,
        real_base_url=args.base_url,
        real_model=args.model,
        judge_latency_s=args.judge_latency,
        teacher_latency_s=args.teacher_latency,
        gen_time_s=pick(args.gen_time, 10.0, 0.5, q),
        k=args.k,
        judge_concurrency=pick(args.judge_concurrency, OPDConfig().judge_concurrency, None, False),
        teacher_concurrency=pick(args.teacher_concurrency, TeacherConfig().concurrency, None, False),
    )
    return asyncio.run(run(cfg))
