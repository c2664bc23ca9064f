"""Run `hermes-opd process` as a subprocess and read what it wrote."""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


LOCAL_CPU = REPO / "configs" / "local-cpu.yaml"


def _job_argv(dev_server, out: Path, groups: int, *extra: str) -> list[str]:
    model_dir = str(dev_server.model_dir)
    return [
        sys.executable,
        "-m",
        "hermes_opd.commands.main",
        "process",
        "--config",
        str(LOCAL_CPU),
        "--out",
        str(out),
        "--groups",
        str(groups),
        "--progress",
        "lines",
        "--openai.base_url",
        dev_server.base_url,
        "--openai.model_name",
        dev_server.model_name,
        "--openai.tokenizer_name",
        model_dir,
        "--env.tokenizer_name",
        model_dir,
        # small rollouts keep each group to seconds on 2 cores
        "--env.group_size",
        "2",
        "--env.max_turns",
        "2",
        "--env.max_tokens_per_turn",
        "128",
        *extra,
    ]


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_bytes().splitlines() if line.strip()]
