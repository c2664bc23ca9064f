"""Per-step metrics: one JSON object per line in a file, and a one-line summary on stdout."""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import TextIO

SUMMARY_KEYS = ("loss/total", "loss/grpo", "loss/opd", "opd/reverse_kl", "grpo/clip_frac", "grad_norm")


class MetricsLog:
    """Appends `{"step": N, "time": unix_s, **metrics}` to a JSONL file (resume keeps appending)."""

    def __init__(self, path: str | Path | None, *, stdout: bool = True, stream: TextIO | None = None) -> None:
        self.path = Path(path) if path else None
        self.stdout = stdout
        self.stream = stream or sys.stdout
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, step: int, metrics: dict[str, float]) -> None:
        record = {"step": step, "time": time.time(), **{k: _json_number(v) for k, v in metrics.items()}}
        if self.path is not None:
            with self.path.open("a") as f:
                f.write(json.dumps(record) + "\n")
        if self.stdout:
            shown = [f"{key} {metrics[key]:.4f}" for key in SUMMARY_KEYS if key in metrics]
            print(f"step {step} | " + " | ".join(shown), file=self.stream, flush=True)


def _json_number(value: float) -> float | str:
    """JSON has no NaN/inf: write them as strings so the file stays valid JSON."""
    value = float(value)
    return value if math.isfinite(value) else str(value)
