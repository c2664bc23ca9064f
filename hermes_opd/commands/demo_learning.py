"""The README's main job, `hermes-opd demo`: OPD on a small agent, on a laptop CPU.

On the copying student that ships with the project (`hermes_opd/learning_study/student_q2`, 1.6M
parameters) and the convention tasks (each task's checker wants a function of a given name in a
given file; 24 held-out tasks whose nouns the student never saw), through the learning
bench's own machinery (hermes_opd/learning_study/loop.py, hermes_opd/learning_study/configs/learning-student-quick.yaml):

1. one CPU vLLM that serves the student and hot-loads LoRA adapters (`start_lora_vllm`);
2. a few OPD groups collected with the loop's own env settings (`env_document`): real tool calls,
   the checker's feedback, the rules judge's hints, the teacher's top-50 rows; written to
   DIR/groups.jsonl with the inspector's DIR/report.html and the validator's DIR/validation.json;
3. held-out success of the student before training (the env's greedy `evaluate`, no hint);
4. the real closed loop, OPD only (`run_arm`): run-api, an env `serve` worker, `hermes-opd train`
   (LoRA, each step's weights loaded into the same vLLM), then each evaluated checkpoint;
5. DIR/learning.png and DIR/learning.json (the bench's `write_outputs`), and one screen that says
   what happened.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import shutil
import sys
import textwrap
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hermes_opd.commands.progress import format_duration
from hermes_opd.learning_study.paths import CONFIG_DIR
from hermes_opd.vllm_api.client import root_url

CLAIM = (
    "OPD amplified a value the student already preferred: helpers.py, written in 6 of 12 held-out module "
    "tasks before training (compute_<noun>, chosen in 0 of 12, barely moves). A value it never chose is "
    "taught by the transmission test's longer run: utils.py 0 -> 12 of 12 in 5 of 6 seeds, 0 under "
    'every control (docs/recipes/learning-bench.md, "Amplified or taught"); through the proxy, a '
    "user's words teach both values to student_q2c, this student continued on corrections "
    "(docs/recipes/live-bench.md)."
)
"""The demo's claim, printed on its last screen: what the measured runs showed, and what they did not."""
CONFIG = CONFIG_DIR / "learning-student-quick.yaml"
"""The loop's settings: the README test command's learning test runs exactly these."""
ARM = "opd"
SERVED_MODEL = "student-q2"


@dataclass
class DemoTimes:
    """Wall time of each stage, in seconds (printed on the last screen)."""

    stages: dict[str, float] = field(default_factory=dict)
    _t0: float = field(default_factory=time.monotonic)

    @contextlib.contextmanager
    def stage(self, name: str):
        t0 = time.monotonic()
        try:
            yield
        finally:
            self.stages[name] = time.monotonic() - t0

    def line(self) -> str:
        return ", ".join(f"{name} {format_duration(s)}" for name, s in self.stages.items())


def _step(text: str) -> None:
    print(f"==> {text}", flush=True)


def loop_settings(args: argparse.Namespace, out_dir: Path):
    """The bench's settings from CONFIG, with the demo's --steps / --eval-every / --student-model."""
    from hermes_opd.learning_study.bench import add_arguments, resolve_settings
    from hermes_opd.learning_study.paths import shipped_student_dir

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    argv = [
        "--config",
        str(CONFIG),
        "--student-model",
        str(args.student_model or shipped_student_dir()),
        "--served-model",
        SERVED_MODEL,
        "--out",
        str(out_dir),
        "--arms",
        ARM,
        "--seeds",
        "1",
        "--first-seed",
        str(args.seed),
    ]
    for flag, value in (
        ("--steps", args.steps),
        ("--eval-every", args.eval_every),
        ("--vllm-url", root_url(args.policy_url) if args.policy_url else None),
    ):
        if value is not None:
            argv += [flag, str(value)]
    return resolve_settings(parser.parse_args(argv))


def run(args: argparse.Namespace) -> int:
    """The learning demo (under `hermes-opd demo`'s `sigterm_exits`: SIGTERM unwinds through the
    `finally` that stops vLLM)."""
    from hermes_opd.learning_study.loop import evaluate_policy, run_arm, start_lora_vllm

    started = time.monotonic()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    values, settings = loop_settings(args, out_dir)
    clear_earlier_run(out_dir, args.seed)
    times = DemoTimes()
    server = None
    try:
        if settings.vllm_root_url:
            _step(f"vLLM: using {settings.vllm_root_url} (model {settings.served_model}, LoRA enabled)")
        else:
            _step(
                f"vLLM: starting a CPU server for {settings.model_dir} with LoRA hot-loading "
                f"(about a minute; log {out_dir / 'vllm.log'})"
            )
            with times.stage("vLLM start"):
                server = start_lora_vllm(
                    settings.model_dir,
                    settings.lora_r,
                    out_dir / "vllm.log",
                    settings.served_model,
                    on_wait=_say_waiting,
                )
            settings.vllm_root_url = server.root_url
            _step(f"vLLM: ready at {server.root_url} in {format_duration(times.stages['vLLM start'])}")
        with times.stage("collection"):
            collected = collect_groups(args, settings, out_dir)
        if collected is None:
            return 1
        _step("held-out success before training: the 24 held-out tasks, greedy, no hint")
        with times.stage("evaluation before"):
            start_eval = evaluate_policy(
                settings, seed=args.seed, prefix=None, metrics_path=out_dir / "start_eval.jsonl"
            )
        _step(f"before: {passes(start_eval)} held-out tasks passed")
        _step(
            f"the closed loop, OPD only: {settings.steps} steps of {settings.groups_per_step} groups of "
            f"{settings.group_size} (run-api, an env worker, hermes-opd train with LoRA; logs in "
            f"{out_dir / f'{ARM}-seed{args.seed}'})"
        )
        with times.stage("loop + evaluations"):
            records = run_arm(settings, ARM, args.seed, start_eval, on_wait=_say_waiting)
    finally:
        if server is not None:
            _step("vLLM: stopping")
            server.stop()
    figure = write_learning_outputs(settings, values, records, out_dir, started)
    print_screen(records, collected, settings, out_dir, figure, times, time.monotonic() - started)
    return 0 if collected.ok else 1


def clear_earlier_run(out_dir: Path, seed: int) -> None:
    """DIR is the demo's own: an earlier run's loop directory (the trainer's and env's metrics files
    are appended to) and outputs go, so that every run reports only itself."""
    shutil.rmtree(out_dir / f"{ARM}-seed{seed}", ignore_errors=True)
    for name in (
        "start_eval.jsonl",
        "learning.json",
        "learning.png",
        "learning-summary.txt",
        "validation.json",
    ):
        with contextlib.suppress(FileNotFoundError):
            (out_dir / name).unlink()


def _say_waiting(text: str) -> None:
    print(f"    ... {text}", flush=True)


@dataclass
class Collected:
    groups_path: Path
    report_path: Path | None
    validation: Any
    result: Any
    hints: Counter[str]
    judged_turns: int
    feedback: str | None
    """One failing rollout's checker feedback, as the student saw it."""

    @property
    def ok(self) -> bool:
        return self.result.complete and self.validation.clean and self.report_path is not None


def collect_groups(args: argparse.Namespace, settings, out_dir: Path) -> Collected | None:
    """`args.groups` OPD groups with the loop's own env, the inspector's report and the validator."""
    from environments.atropos.agentic_opd_env import AgenticOPDEnv
    from environments.atropos.config_loading import build_job_config
    from hermes_opd.commands import inspect as inspector
    from hermes_opd.commands.process import run_job
    from hermes_opd.commands.validate import validate_jsonl
    from hermes_opd.learning_study.loop import env_document

    groups_path, report_path = out_dir / "groups.jsonl", out_dir / "report.html"
    document = env_document(settings, seed=args.seed, prefix=None, metrics_path=out_dir / "metrics.jsonl")
    document["env"].update(total_steps=args.groups, opd_enabled=True)
    job = build_job_config(document, source="demo", env_cls=AgenticOPDEnv)
    _step(
        f"collecting {args.groups} OPD group(s) of {settings.group_size} rollouts on the convention tasks "
        "(real tools, the checker, the rules judge, the teacher's top-50 rows)"
    )
    with contextlib.suppress(FileNotFoundError):
        report_path.unlink()
    result, _stop = asyncio.run(run_job(job, groups_path, args.groups, concurrency=args.groups, fresh=True))
    if result.interrupted:
        print(
            f"hermes-opd demo: stopped by {result.interrupted} after {result.written} group(s)",
            file=sys.stderr,
        )
        return None
    report_ok = False
    if result.written:
        with contextlib.redirect_stdout(sys.stderr):
            argv = [str(groups_path), "--out", str(report_path), "--tokenizer", settings.model_dir]
            report_ok = inspector.main(argv) == 0
    validation = validate_jsonl(groups_path)
    (out_dir / "validation.json").write_text(json.dumps(validation.to_dict(), indent=1) + "\n")
    hints, judged, feedback = read_hints(groups_path)
    return Collected(
        groups_path, report_path if report_ok else None, validation, result, hints, judged, feedback
    )


def read_hints(groups_path: Path) -> tuple[Counter[str], int, str | None]:
    """(hint -> turns that got it, judged turns, one failing rollout's checker feedback) of a groups file."""
    from hermes_opd.contract.provenance import parse_provenance

    hints: Counter[str] = Counter()
    judged = 0
    feedback = None
    for line in groups_path.read_text().splitlines():
        group = json.loads(line)
        for seq, overrides in enumerate(group.get("overrides") or []):
            provenance = parse_provenance((overrides or {}).get("opd"))
            for turn in provenance.turns:
                if turn.status in ("no_next_state", "skipped", "unknown"):
                    continue
                judged += 1
                if turn.hint:
                    hints[turn.hint] += 1
            messages = (group.get("messages") or [])[seq] if seq < len(group.get("messages") or []) else []
            if feedback is None and group["scores"][seq] < 1.0:
                feedback = _last_feedback(messages)
    return hints, judged, feedback


def _last_feedback(messages: list[Any]) -> str | None:
    """The last non-assistant message after the first assistant turn (a tool result or the checker)."""
    seen_assistant = False
    found = None
    for message in messages or []:
        if not isinstance(message, dict):
            continue
        if message.get("role") == "assistant":
            seen_assistant = True
        elif seen_assistant and isinstance(message.get("content"), str):
            found = message["content"]
    return found


def write_learning_outputs(settings, values: dict[str, Any], records, out_dir: Path, started: float) -> Path:
    """learning.json and learning.png through the bench's own `write_outputs`; its table goes to
    DIR/learning-summary.txt (the demo prints its own screen)."""
    from hermes_opd.learning_study.bench import write_outputs

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        write_outputs(settings, values, [records], started)
    (out_dir / "learning-summary.txt").write_text(buffer.getvalue())
    return out_dir / "learning.png"


def passes(evaluation: dict[str, Any]) -> str:
    tasks = int(evaluation.get("eval/tasks", 0))
    return f"{round(float(evaluation['eval/pass@1']) * tasks)}/{tasks}"


def print_screen(
    records, collected: Collected, settings, out_dir: Path, figure: Path, times: DemoTimes, wall_s: float
) -> None:
    first, last = records.evals[0], records.evals[-1]
    steps = int(last["policy_version"])
    change = round(float(last["eval/pass@1"]) * int(last["eval/tasks"])) - round(
        float(first["eval/pass@1"]) * int(first["eval/tasks"])
    )
    t = collected.result.totals
    v = collected.validation
    verdict = (
        "clean" if v.clean else f"{v.violation_count} violation(s), {v.invalid_line_count} unreadable line(s)"
    )
    print()
    print(
        f"hermes-opd demo: OPD on the copying student {Path(settings.model_dir).name} "
        f"(a {settings.served_model} LoRA, {steps} steps, {steps * settings.generations_per_step} generations)"
    )
    print(
        f"  held-out success  before {passes(first)}  ->  after {passes(last)}  ({change:+d} tasks; "
        "greedy, no hint, tasks whose nouns the student never saw)"
    )
    print(
        "  at each step      "
        + "   ".join(f"step {int(e['policy_version'])}: {passes(e)}" for e in records.evals)
    )
    print(_wrapped(CLAIM, "  what it shows     ", " " * 20))
    probe = records.probe or {}
    start_gap, end_gap = probe.get("teacher_gap_all_start"), probe.get("teacher_gap_all_end")
    if start_gap is not None and end_gap is not None:
        print(
            f"  teacher gap       {start_gap:.3f} -> {end_gap:.3f} nats over "
            f"{probe.get('teacher_gap_all_positions', 0):,} positions (the student's distance to its hinted self)"
        )
    print(
        f"  hints             {sum(collected.hints.values())} of {collected.judged_turns} judged turns got one; "
        "the judge said:"
    )
    for hint, count in collected.hints.most_common(3):
        print(_wrapped(f'{count} x "{_one_line(hint, 400)}"', " " * 20, " " * 24))
    if collected.feedback:
        print(_wrapped(f'"{_one_line(collected.feedback, 400)}"', "  checker feedback  ", " " * 20))
    print(
        f"  groups            {collected.result.present} x {settings.group_size} rollouts, mean score "
        f"{t.mean_score:.2f}, {t.tokens_scored:,} tokens scored by the teacher; validator {verdict}"
    )
    print(f"  figure            {figure}")
    print(
        f"  report            {collected.report_path or '(not written)'}  (conversations, hints, tokens "
        "coloured by teacher advantage)"
    )
    print(
        f"  data              {collected.groups_path}, {out_dir / 'validation.json'}, {out_dir / 'learning.json'}"
    )
    print(f"  time              {format_duration(wall_s)} ({times.line()})")
    print(
        "  the dev-model collection instead: hermes-opd demo --dev-model   (docs/recipes/conventions-demo.md)"
    )


def _wrapped(text: str, first: str, rest: str) -> str:
    return textwrap.fill(text, width=110, initial_indent=first, subsequent_indent=rest)


def _one_line(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "\u2026"
