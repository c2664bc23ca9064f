"""The short table `python -m environments.atropos.agentic_opd_env evaluate` prints at the end (pure).

```
evaluate: agentic-opd, 5 eval tasks, model dev-model at http://127.0.0.1:9001/v1
  pass@1       0.200
  mean score   0.350
  tasks        5
  time         11.8 s
  metrics      runs/local-cpu/metrics.jsonl (the last line with "kind": "eval")
  eval log     runs/eval/metrics.json
```

The `eval log` line appears only with `data_dir_to_save_evals` set (atroposlib's eval log).
`parse_eval_report` reads the table back (tests compare it with the metrics file).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

ROWS = ("pass@1", "mean score", "tasks", "time", "metrics", "eval log")
_WIDTH = 12


@dataclass(frozen=True)
class EvalReport:
    env_name: str
    metrics: dict[str, float]
    """What `AgenticOPDEnv.evaluate` returned (`eval/pass@1`, `eval/mean_score`, `eval/tasks`)."""
    elapsed_s: float
    metrics_path: Path
    eval_log_path: Path | None = None
    model: str | None = None
    base_url: str | None = None


def format_eval_report(report: EvalReport) -> str:
    m = report.metrics
    tasks = int(m.get("eval/tasks", 0))
    head = f"evaluate: {report.env_name}, {tasks} eval task{'s' if tasks != 1 else ''}"
    if report.model:
        head += f", model {report.model}" + (f" at {report.base_url}" if report.base_url else "")
    rows = [
        ("pass@1", f"{m.get('eval/pass@1', 0.0):.3f}"),
        ("mean score", f"{m.get('eval/mean_score', 0.0):.3f}"),
        ("tasks", str(tasks)),
        ("time", f"{report.elapsed_s:.1f} s"),
        ("metrics", f'{report.metrics_path} (the last line with "kind": "eval")'),
    ]
    if report.eval_log_path is not None:
        rows.append(("eval log", str(report.eval_log_path)))
    return "\n".join([head, *(f"  {name:<{_WIDTH}} {value}" for name, value in rows)])


def parse_eval_report(text: str) -> dict[str, str]:
    """The rows of the last report in `text`, by name (values as printed)."""
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("evaluate: ")]
    if not starts:
        raise ValueError("no evaluate report in the text")
    rows: dict[str, str] = {"header": lines[starts[-1]]}
    for line in lines[starts[-1] + 1 :]:
        name = line[2 : 2 + _WIDTH].strip()
        if not line.startswith("  ") or name not in ROWS:
            break
        rows[name] = line[2 + _WIDTH + 1 :]
    return rows
