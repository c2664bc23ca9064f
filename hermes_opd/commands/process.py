"""`hermes-opd process --config FILE [--out PATH] [--groups N] [--env.KEY VALUE ...] [--openai.KEY VALUE ...]`

A batch job over `AgenticOPDEnv` that writes OPD groups to disk: one ScoredDataGroup per JSON line,
written whole, flushed and fsynced; a rerun with the same output resumes (no duplicate, no missing
group); Ctrl-C stops cleanly without losing a finished group. See docs/process.md.

We drive `env.setup()` and `env.collect_trajectories()` ourselves instead of atroposlib's
`process_manager`: that one opens a new file name on every run (no resume), writes through a
buffered writer without fsync, turns wandb on by default, has no progress display and no signal
handling, and runs one group at a time.

Line format: `{"group_index": i, "task_id": "...", <ScoredDataGroup fields>}`. Group `i` is the
task the env's deterministic order puts at cursor position `i`; `group_index` and `task_id` come
first so that a resume reads them without parsing the (large) rest of each line.

Exit codes: 0 every group up to the target is present; 1 the run failed (setup, groups that failed
every attempt); 2 a usage or config error (bad YAML, unknown key, missing file, an output file this
job did not write, a server the preflight check rejects); 130 stopped by SIGINT, 143 by SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from environments.atropos.config_loading import JobConfig, load_job_config, split_overrides
from environments.atropos.user_errors import names_a_permanent_error, permanent_errors
from environments.delivery.group_replay import APIGoneError, GroupReplayer, ReplayOptions, ReplayResult
from environments.delivery.groups_file import GroupWriter, OutputError, scan_output
from environments.delivery.send_cursor import CursorError, cursor_path
from environments.delivery.tinker_drops import DenseK1Notice
from environments.pipeline.role_servers import RoleServers, check_role_servers
from hermes_opd.commands.cli_input import OneLineParser, add_pacing_arguments, options_from, pacing_error
from hermes_opd.commands.progress import GroupSummary, Progress, RunTotals, format_duration
from hermes_opd.commands.send_report import summary_lines
from hermes_opd.contract.errors import ConfigError, HermesOPDError
from hermes_opd.contract.log_setup import configure_logging
from hermes_opd.runtime.cli_flags import add_atropos_url, add_log_level, add_policy_url
from hermes_opd.runtime.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_SIGINT, EXIT_SIGTERM, EXIT_USAGE
from hermes_opd.runtime.stop_signals import StopSignals
from hermes_opd.runtime.wait_notice import WAIT_NOTICE_S

logger = logging.getLogger(__name__)

DEFAULT_OUT = "runs/process/groups.jsonl"


class PreflightError(HermesOPDError, RuntimeError):
    """A server the job needs is unreachable or misconfigured."""


class Interrupted(HermesOPDError):
    """A stop signal arrived before the job could start collecting."""


# -- stopping -------------------------------------------------------------------------------------
class StopController:
    """SIGINT: finish the groups in flight, start no new one; a second SIGINT abandons them.
    SIGTERM (schedulers, `kill`): abandon the groups in flight at once. Abandoned groups are not
    written; a rerun collects them."""

    def __init__(self, progress: Progress | None = None) -> None:
        self.signal_name: str | None = None
        self.stopping = asyncio.Event()
        self.abandon = asyncio.Event()
        self.progress = progress
        self.in_flight = 0
        self._signals = StopSignals(self.on_signal)

    def install(self) -> None:
        self._signals.install()

    def uninstall(self) -> None:
        self._signals.uninstall()

    def _say(self, text: str) -> None:
        if self.progress is not None:
            self.progress.message(text)
        else:
            print(text, file=sys.stderr, flush=True)

    def on_signal(self, sig: int) -> None:
        name = signal.Signals(sig).name
        first = self.signal_name is None
        if first or sig == signal.SIGTERM:
            self.signal_name = name
        self.stopping.set()
        if sig == signal.SIGTERM or not first:
            if not self.abandon.is_set():
                self._say(
                    f"{name}: stopping now; {self.in_flight} unfinished group(s) abandoned (a rerun collects them)"
                )
            self.abandon.set()
        elif self.in_flight:
            self._say(
                f"{name}: finishing {self.in_flight} group(s) in flight, starting no new one "
                "(Ctrl-C again to abandon them)"
            )
        else:
            self._say(f"{name}: stopping")

    @property
    def exit_code(self) -> int:
        return EXIT_SIGTERM if self.signal_name == "SIGTERM" else EXIT_SIGINT


async def _until_stopped(coro: Any, stop: StopController, event: asyncio.Event | None = None) -> Any:
    """Run `coro`, but give up (Interrupted) as soon as `event` (default: stop.stopping) is set."""
    event = event or stop.stopping
    task = asyncio.ensure_future(coro)
    waiter = asyncio.ensure_future(event.wait())
    try:
        done, _ = await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
    if task in done:
        return task.result()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await asyncio.wait_for(task, timeout=30)
    raise Interrupted(stop.signal_name or "stop")


# -- preflight ------------------------------------------------------------------------------------
async def preflight(job: JobConfig, roles: RoleServers, tokenizer: Any) -> list[str]:
    """Check every endpoint the job will use before any rollout, with the env's own check
    (environments/pipeline/role_servers.py) on the env's resolved `roles`: reachable, serving the
    model, a long enough context; then (teacher) allowed enough logprobs. Returns warnings; raises
    PreflightError with what to change."""
    from hermes_opd.vllm_api.client import VLLMCompletionsClient
    from hermes_opd.vllm_api.errors import VLLMError
    from hermes_opd.vllm_api.retry import RetryPolicy
    from scoring.request_paths import completions_prompt_topk

    env = job.env
    needed = {"policy": env.max_token_length, "teacher": env.max_token_length + 64}
    try:
        warnings = await check_role_servers(roles, min_model_len=needed)
    except VLLMError as exc:
        raise PreflightError(str(exc)) from exc
    teacher = roles.teacher.endpoint
    if env.opd_enabled and teacher is not None:
        client = VLLMCompletionsClient(
            teacher.base_url,
            teacher.model,
            api_key=teacher.api_key,
            timeout_s=60.0,
            retry=RetryPolicy(max_attempts=2),
        )
        probe = tokenizer.encode("def f(x):\n    return x\n", add_special_tokens=False) or [0, 1]
        try:
            await completions_prompt_topk(client, list(probe), env.distill_topk)
        except VLLMError as exc:
            raise PreflightError(f"teacher scoring probe failed: {exc}") from exc
        finally:
            await client.close()
    if env.student_topk_k:  # every policy server must return the student's top-K rows
        from environments.delivery.student_topk_check import check_policy_top_logprobs

        for policy in roles.policy:
            if policy.base_url is None or policy.model is None:
                continue
            client = VLLMCompletionsClient(
                policy.base_url,
                policy.model,
                api_key=policy.api_key,
                timeout_s=60.0,
                retry=RetryPolicy(max_attempts=2),
            )
            try:
                await check_policy_top_logprobs(client, env.student_topk_k, tokenizer)
            except (VLLMError, ConfigError) as exc:
                raise PreflightError(f"{policy.role} top-K probe failed: {exc}") from exc
            finally:
                await client.close()
    return warnings


# -- the job --------------------------------------------------------------------------------------
@dataclass
class JobResult:
    out: Path
    metrics_path: Path
    target: int
    present_before: int = 0
    written: int = 0
    failed: list[int] = field(default_factory=list)
    errors: dict[int, str] = field(default_factory=dict)
    truncated_bytes: int = 0
    interrupted: str | None = None
    aborted: str | None = None
    totals: RunTotals = field(default_factory=RunTotals)
    elapsed_s: float = 0.0
    collect_s: float = 0.0
    """Wall time from the first group started to the last one written."""
    groups_per_min: float = 0.0
    warnings: list[str] = field(default_factory=list)
    sent: ReplayResult | None = None
    """What `--send` delivered to the Atropos API (None without --send)."""
    send_error: str | None = None

    @property
    def present(self) -> int:
        return self.present_before + self.written

    @property
    def complete(self) -> bool:
        return self.present >= self.target and not self.failed

    def exit_code(self, stop: StopController | None = None) -> int:
        if self.interrupted and stop is not None:
            return stop.exit_code
        send_failed = self.send_error is not None or (self.sent is not None and not self.sent.complete)
        return EXIT_OK if self.complete and not send_failed else EXIT_FAILED


def group_failure(group: dict[str, Any] | None, group_size: int) -> str | None:
    """Why `group` must not be written (None: it is fine). A rollout that died on a server error
    would enter the data as a zero-score sequence and skew the group's advantages, so such a group
    is collected again instead."""
    if group is None:
        return "collect_trajectories returned no group"
    tokens = group.get("tokens") or []
    if len(tokens) != group_size:
        return f"group has {len(tokens)} sequences, expected group_size={group_size}"
    for override in group.get("overrides") or []:
        if (override or {}).get("stop_reason") == "generation_error":
            return f"a rollout stopped on a generation error: {(override or {}).get('error', '?')}"
    return None


def _metrics_path(job: JobConfig, out: Path) -> Path:
    if job.env.metrics_path:
        return Path(job.env.metrics_path)
    name = out.name[: -len(".jsonl")] if out.name.endswith(".jsonl") else out.name
    return out.with_name(f"{name}.metrics.jsonl")


async def _item_for(env: Any, index: int) -> Any:
    """The task the env's deterministic order puts at cursor position `index`."""
    env.seek(index)
    return await env.get_next_item()


def _task_id_at(env: Any, index: int) -> str:
    return env.task_at(index).task_id


async def run_job(
    job: JobConfig,
    out: str | Path,
    groups: int,
    *,
    concurrency: int | None = None,
    fresh: bool = False,
    do_preflight: bool = True,
    progress_mode: str = "auto",
    max_attempts: int = 2,
    max_consecutive_failures: int = 3,
    stop: StopController | None = None,
    send: ReplayOptions | None = None,
) -> tuple[JobResult, StopController]:
    """Collect groups `0..groups-1` into `out` (resuming what is there unless `fresh`). With `send`,
    replay the file into the Atropos API while it grows (environments/delivery/group_replay.py), from its cursor."""
    started = time.monotonic()
    out = Path(out)
    concurrency = concurrency or job.concurrency
    metrics_path = _metrics_path(job, out)
    result = JobResult(out=out, metrics_path=metrics_path, target=groups)
    stop = stop or StopController()
    stop.install()
    env = None
    writer: GroupWriter | None = None
    progress: Progress | None = None
    replay: asyncio.Task | None = None
    try:
        if fresh:
            for path in (out, metrics_path, cursor_path(out)):
                if path.exists():
                    path.unlink()
        existing = scan_output(out)
        if existing.truncated_bytes:
            logger.warning("cut off a torn last line (%d bytes) of %s", existing.truncated_bytes, out)
        result.truncated_bytes = existing.truncated_bytes
        from environments.atropos.agentic_opd_env import AgenticOPDEnv

        env_config = job.env.model_copy(deep=True)
        env_config.data_path_to_save_groups = None  # we write the file; BaseEnv would open a new name
        env_config.metrics_path = str(metrics_path)
        env = AgenticOPDEnv(env_config, list(job.servers), slurm=job.slurm, testing=job.testing)
        env.check_servers_at_setup = False  # the preflight below checks the same and more (or is skipped)
        if do_preflight:
            result.warnings = await _until_stopped(preflight(job, env.role_servers, env.tokenizer), stop)
            for warning in result.warnings:
                logger.warning("preflight: %s", warning)
        await _until_stopped(env.setup(), stop)
        for index, task_id in sorted(existing.tasks.items()):
            expected = _task_id_at(env, index)
            if task_id != expected:
                raise OutputError(
                    f"{out} line {existing.lines[index]}: group {index} is task {task_id!r}, but this config puts "
                    f"task {expected!r} at index {index}: the file was written with another task order "
                    "(seed, task source, eval_fraction). Use the same config, another --out, or --overwrite"
                )
        result.present_before = sum(1 for i in existing.tasks if i < groups)
        todo = deque(i for i in range(groups) if i not in existing.tasks)
        if env_config.use_wandb:
            _init_wandb(env_config)
        writer = GroupWriter(out)
        progress = Progress(groups, result.present_before, mode=progress_mode)
        stop.progress = progress
        redirect = contextlib.nullcontext()
        if progress.has_bar:
            from tqdm.contrib.logging import logging_redirect_tqdm

            redirect = logging_redirect_tqdm()  # log lines above the bar, not through it
        collecting = asyncio.Event()
        if send is not None:
            replayer = GroupReplayer(
                out, send, more_coming=lambda: not collecting.is_set(), on_message=progress.message
            )
            replay = asyncio.ensure_future(replayer.run())
        with redirect:
            await _collect_loop(
                env,
                job,
                writer,
                progress,
                stop,
                todo,
                result,
                concurrency,
                max_attempts,
                max_consecutive_failures,
            )
            collecting.set()
            if replay is not None:
                progress.message(f"collection over; sending the rest of {out} to {send.api_url}")
                await _finish_sending(replay, result, stop)
        result.totals = progress.totals
        result.groups_per_min = progress.groups_per_min()
        result.collect_s = time.monotonic() - progress.started
    except Interrupted as exc:
        result.interrupted = str(exc)
    finally:
        if replay is not None and not replay.done():
            replay.cancel()  # the cursor holds what was acknowledged: a rerun sends the rest
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await replay
        if progress is not None:
            progress.close()
        if writer is not None:
            writer.close()
        if env is not None:
            await env.close()
            if env.config.use_wandb:
                with contextlib.suppress(Exception):
                    import wandb

                    wandb.finish()
        stop.uninstall()
        result.elapsed_s = time.monotonic() - started
    if stop.signal_name and not result.interrupted:
        result.interrupted = stop.signal_name
    return result, stop


async def _finish_sending(replay: asyncio.Task, result: JobResult, stop: StopController) -> None:
    """Wait for the sender to deliver the whole file (a SIGTERM or a second Ctrl-C abandons it)."""
    try:
        result.sent = await _until_stopped(replay, stop, stop.abandon)
    except Interrupted:
        result.send_error = "stopped before every group was sent; rerun the same command to send the rest"
    except (APIGoneError, CursorError) as exc:
        result.send_error = str(exc)


def _init_wandb(env_config: Any) -> None:
    import wandb

    wandb.init(
        project=os.environ.get("WANDB_PROJECT", "hermes-opd"),
        name=env_config.wandb_name,
        config=env_config.model_dump(mode="json"),
    )


async def _collect_loop(
    env: Any,
    job: JobConfig,
    writer: GroupWriter,
    progress: Progress,
    stop: StopController,
    todo: deque[int],
    result: JobResult,
    concurrency: int,
    max_attempts: int,
    max_consecutive_failures: int,
) -> None:
    group_size = env.config.group_size
    dense_k1 = DenseK1Notice(progress.message)  # once per run (environments/delivery/tinker_drops.py)
    attempts: dict[int, int] = {}
    running: dict[asyncio.Task, int] = {}
    consecutive_failures = 0

    async def collect(index: int) -> tuple[str, dict[str, Any] | None, float]:
        task = await _item_for(env, index)
        t0 = time.monotonic()
        group, _backlog = await env.collect_trajectories(task)
        return task.task_id, group, time.monotonic() - t0

    abandon_waiter = asyncio.ensure_future(stop.abandon.wait())
    last_finished = time.monotonic()
    try:
        while True:
            while todo and len(running) < concurrency and not stop.stopping.is_set() and not result.aborted:
                index = todo.popleft()
                attempts[index] = attempts.get(index, 0) + 1
                running[asyncio.ensure_future(collect(index))] = index
            stop.in_flight = len(running)
            if not running:
                break
            done, _ = await asyncio.wait(
                {*running, abandon_waiter}, timeout=WAIT_NOTICE_S, return_when=asyncio.FIRST_COMPLETED
            )
            if not done:
                progress.still_waiting(len(running), last_finished)
                continue
            last_finished = time.monotonic()
            for task in [t for t in done if t in running]:
                index = running.pop(task)
                error: str | None = None
                permanent = False
                try:
                    task_id, group, duration = task.result()
                    error = group_failure(group, group_size)
                    permanent = error is not None and names_a_permanent_error(error)
                    if error is None:
                        writer.write(index, task_id, group)
                        if warning := dense_k1.check(group):
                            result.warnings.append(warning)
                except Exception as exc:  # noqa: BLE001 - one group's failure is reported, then retried
                    error = f"{type(exc).__name__}: {exc}"
                    permanent = isinstance(exc, permanent_errors())
                if error is None:
                    consecutive_failures = 0
                    result.written += 1
                    progress.group_done(index, task_id, GroupSummary.of(group), duration)
                    if env.config.use_wandb:
                        env.curr_step = result.present_before + result.written
                        try:
                            await env.wandb_log()
                        except Exception as exc:  # noqa: BLE001 - logging must not stop the job
                            logger.warning("wandb logging failed: %s: %s", type(exc).__name__, exc)
                    continue
                logger.warning(
                    "group %d failed (attempt %d/%d): %s", index, attempts[index], max_attempts, error
                )
                if permanent:
                    result.errors[index] = error
                    result.failed.append(index)
                    result.aborted = f"permanent error: {error}"
                    continue
                if attempts[index] < max_attempts:
                    todo.appendleft(index)
                    continue
                result.errors[index] = error
                result.failed.append(index)
                consecutive_failures += 1
                progress.message(
                    f"group {index} failed {attempts[index]} times, left for a rerun: {error[:300]}"
                )
                if consecutive_failures >= max_consecutive_failures:
                    result.aborted = f"{consecutive_failures} groups in a row failed every attempt; last error: {error[:500]}"
            if result.aborted and not stop.stopping.is_set():
                progress.message(f"aborting: {result.aborted}")
                stop.stopping.set()
            if stop.abandon.is_set():
                break
    finally:
        abandon_waiter.cancel()
        for task in running:
            task.cancel()
        if running:
            await asyncio.wait(running, timeout=30)
        stop.in_flight = 0


# -- command line ---------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="hermes-opd process",
        description="Collect OPD groups to a JSONL file with progress, resume and a clean Ctrl-C. "
        "Any --env.KEY VALUE / --openai.KEY VALUE (--openai.N.KEY for a list) overrides the config.",
        epilog="See docs/process.md.",
    )
    parser.add_argument(
        "--config", help="Atropos-style YAML (env:, openai:, process:); default: built-in defaults"
    )
    parser.add_argument(
        "--out", help=f"output JSONL (default: env.data_path_to_save_groups, else {DEFAULT_OUT})"
    )
    parser.add_argument(
        "--groups", type=int, help="groups the file should hold in the end (default: env.total_steps)"
    )
    parser.add_argument(
        "--concurrency", type=int, help="groups in flight at once (default: process.concurrency, 1)"
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="start over instead of resuming an existing output"
    )
    parser.add_argument(
        "--no-preflight", action="store_true", help="skip the server checks before the first group"
    )
    parser.add_argument(
        "--progress",
        choices=("auto", "bar", "lines", "none"),
        default="auto",
        help="auto: a bar on a terminal, one line per group otherwise",
    )
    parser.add_argument(
        "--print-config", action="store_true", help="print the merged config as YAML and exit"
    )
    add_atropos_url(
        parser,
        "--send",
        help="also send each group to this Atropos API as it is written (as `hermes-opd send`)",
    )
    add_policy_url(
        parser, help="the policy's vLLM server (…/v1): --openai.base_url, as one spelling for every command"
    )
    add_pacing_arguments(parser)
    add_log_level(parser, help="debug, info, warning or error, any case (default: warning; -v: debug)")
    return parser


def log_level(asked: str | None = None) -> str:
    """Library chatter off the terminal (warnings and up), unless asked for (`--log-level`, or
    `hermes-opd -v`, which has set the root logger to DEBUG)."""
    if asked is not None:
        return asked
    root = logging.getLogger()
    return "debug" if root.level == logging.DEBUG and root.handlers else "warning"


def _print_summary(result: JobResult, stop: StopController) -> None:
    t = result.totals
    state = "complete" if result.complete else ("interrupted" if result.interrupted else "incomplete")
    print(
        f"process {state}: {result.present}/{result.target} groups in {result.out} "
        f"({result.present_before} already there, {result.written} new, {len(result.failed)} failed) "
        f"in {format_duration(result.elapsed_s)}"
        + (f", {result.groups_per_min:.2f} groups/min" if result.written else "")
    )
    if t.groups:
        print(
            f"  new groups: {t.sequences} rollouts, mean score {t.mean_score:.3f}, hints {t.hints}/{t.judged_turns} "
            f"judged turns ({100 * t.hint_rate:.0f}%), {t.scored_turns} turns scored, "
            f"{t.tokens_scored:,} of {t.tokens_generated:,} generated tokens scored"
        )
    if result.truncated_bytes:
        print(f"  cut off a torn last line ({result.truncated_bytes} bytes) left by an earlier run")
    for index in result.failed[:5]:
        print(f"  group {index} failed: {result.errors.get(index, '?')[:300]}")
    if result.aborted:
        print(f"  stopped early: {result.aborted}")
    if result.interrupted:
        print(f"  stopped by {result.interrupted}; rerun the same command to continue")
    elif result.failed:
        print("  rerun the same command to retry the failed groups")
    print(f"  metrics: {result.metrics_path}")
    if result.sent is not None:
        for line in summary_lines(result.sent):
            print(f"  {line}")
    if result.send_error:
        print(f"  send: {result.send_error}")
    if result.present:
        print(f"  next: hermes-opd validate {result.out}; hermes-opd inspect {result.out} --out report.html")


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(list(sys.argv[1:] if argv is None else argv))
    except KeyboardInterrupt:  # before the job's own handlers are installed (imports, config)
        print("hermes-opd process: interrupted", file=sys.stderr)
        return EXIT_SIGINT


def _main(argv: list[str]) -> int:
    parser = build_parser()
    try:
        overrides, rest = split_overrides(argv)
    except ConfigError as exc:
        print(f"hermes-opd process: {exc}", file=sys.stderr)
        return EXIT_USAGE
    args, unknown = parser.parse_known_args(rest)
    if args.policy_url is not None:  # --policy-url is --openai.base_url
        overrides.openai.setdefault(None, {})["base_url"] = args.policy_url
    if unknown:
        print(
            f"hermes-opd process: unknown argument(s): {' '.join(unknown)} "
            "(config keys go as --env.KEY VALUE or --openai.KEY VALUE)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    configure_logging(log_level(args.log_level), override=True)
    from environments.atropos.agentic_opd_env import AgenticOPDEnv

    try:
        job = load_job_config(args.config, overrides, env_cls=AgenticOPDEnv)
    except ConfigError as exc:
        print(f"hermes-opd process: config error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.print_config:
        import yaml

        print(yaml.safe_dump(job.raw, sort_keys=False), end="")
        return EXIT_OK
    groups = args.groups if args.groups is not None else job.env.total_steps
    if groups < 1:
        print(f"hermes-opd process: --groups must be >= 1 (got {groups})", file=sys.stderr)
        return EXIT_USAGE
    concurrency = job.concurrency if args.concurrency is None else args.concurrency
    if concurrency < 1:
        print(f"hermes-opd process: --concurrency must be >= 1 (got {concurrency})", file=sys.stderr)
        return EXIT_USAGE
    out = Path(args.out or job.env.data_path_to_save_groups or DEFAULT_OUT)
    if error := pacing_error(args):
        print(f"hermes-opd process: {error}", file=sys.stderr)
        return EXIT_USAGE
    try:
        result, stop = asyncio.run(
            run_job(
                job,
                out,
                groups,
                concurrency=concurrency,
                fresh=args.overwrite,
                do_preflight=not args.no_preflight,
                progress_mode=args.progress,
                send=options_from(args, args.atropos_url) if args.atropos_url else None,
            )
        )
    except (OutputError, ConfigError) as exc:
        print(f"hermes-opd process: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except PreflightError as exc:  # a server's URL, model name or limits: a config error
        print(f"hermes-opd process: preflight failed: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:  # noqa: BLE001 - setup failures get one clear line, details at -v
        logger.debug("job failed", exc_info=True)
        print(f"hermes-opd process: failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    _print_summary(result, stop)
    return result.exit_code(stop)


if __name__ == "__main__":
    raise SystemExit(main())
