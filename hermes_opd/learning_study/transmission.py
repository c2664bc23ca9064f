"""The transmission test's table and figure: per run, held-out success and each convention's count
(of the 12 held-out tasks of its kind, the attempts that chose the team's value) at every evaluation,
from the bench's `learning.json` files (docs/recipes/learning-bench.md, "Amplified or taught").

A run's label is its arm, or its control (`constant hint`, `no-info words`: its env's judge was the
constant or the redacted backend; `sign flip`: its OPD term negated; `fwd`: the forward KL), and the
convention it ran under (`settings.convention`, the
shipped `compute,helpers` when unset).

`python -m hermes_opd.learning_study.transmission OUT.png BENCH_OUT_DIR...` prints the table and
writes the figure: one panel per convention kind (module, name), the mean count over seeds against
generations with a min-max band, one line per label.

`python -m hermes_opd.learning_study.transmission --rows MODEL_DIR FILE_TOKEN NAME_TOKEN GROUPS.jsonl...`
reads the teacher's rows that OPD trained on (a run's `groups0.jsonl`) at the two decision
positions, the token after `"path": "` (the file name, in module tasks) and the one after
`"content": "def ` (the function's verb, in name tasks): in how many sequences the row holds FILE_TOKEN (e.g. `util`) / NAME_TOKEN (e.g.
`comp`), as its first choice, and its mean probability there.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from hermes_opd.learning_study.report import CONVENTION_KINDS, mean_band

CONTROL_LABELS = {"constant": "constant hint", "redacted": "no-info words"}
"""Judge backend -> the label of a run whose hints came from that control."""


def run_label(document: dict[str, Any], run: dict[str, Any]) -> str:
    """The run's arm, or the control it ran under (its judge's control backend, its OPD sign), and
    `fwd` when its OPD term was the forward KL."""
    settings = document.get("settings") or {}
    env = settings.get("env") or {}
    loss = (settings.get("trainer") or {}).get("loss") or {}
    label = CONTROL_LABELS.get(str(env.get("judge_backend")), str(run["arm"]))
    if loss.get("opd_sign") == -1:
        label += " sign flip"
    if loss.get("kl_direction") == "forward" and run["arm"] != "grpo":  # GRPO only has no KL
        label += " fwd"
    return label


def run_rows(document: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per run: label, seed, convention, and per evaluation (generations, passed, counts)."""
    convention = (document.get("settings") or {}).get("convention") or "compute,helpers"
    rows = []
    for run in document["runs"]:
        points = []
        for (generations, _), evaluation in zip(run["curve"], run["evals"], strict=True):
            tasks = int(evaluation.get("eval/tasks", 24))
            counts = {k: int(v["followed"]) for k, v in (evaluation.get("conventions") or {}).items()}
            points.append(
                {
                    "generations": generations,
                    "passed": round(float(evaluation["eval/pass@1"]) * tasks),
                    **{kind: counts.get(kind) for kind in CONVENTION_KINDS},
                }
            )
        rows.append(
            {
                "label": run_label(document, run),
                "seed": run["seed"],
                "convention": convention,
                "points": points,
            }
        )
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'label':<24}{'seed':>5}  {'convention':<17}{'passed':<17}{'module':<17}{'name':<17}"]
    for row in sorted(rows, key=lambda r: (r["label"], r["seed"])):
        cells = ["/".join(str(p[key]) for p in row["points"]) for key in ("passed", "module", "name")]
        lines.append(
            f"{row['label']:<24}{row['seed']:>5}  {row['convention']:<17}"
            + "".join(f"{c:<17}" for c in cells)
        )
    return "\n".join(lines)


def figure(rows: list[dict[str, Any]], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, panels = plt.subplots(1, len(CONVENTION_KINDS), figsize=(10, 4), sharey=True)
    for axes, kind in zip(panels, CONVENTION_KINDS, strict=True):
        for label in sorted({r["label"] for r in rows}):
            mine = [r for r in rows if r["label"] == label]
            band = mean_band([[(p["generations"], p[kind] or 0) for p in r["points"]] for r in mine])
            xs = [point[0] for point in band]
            (line,) = axes.plot(
                xs, [point[1] for point in band], marker="o", label=f"{label} ({len(mine)} seeds)"
            )
            axes.fill_between(
                xs, [p[2] for p in band], [p[3] for p in band], alpha=0.2, color=line.get_color()
            )
        value = {r["convention"] for r in rows}
        axes.set_title(f"{kind} convention ({', '.join(sorted(value))})")
        axes.set_xlabel("generations")
        axes.set_ylim(-0.5, 12.5)
    panels[0].set_ylabel("held-out tasks choosing the team's value (of 12)")
    panels[0].legend()
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


DECISION_TEXT = {"file": '"path": "', "name": '"content": "def '}
"""The text an attempt has written just before each decision (the copying student's tool-call JSON)."""
TASK_TEXT = {"file": "Put it in one of:", "name": "Name it one of:"}
"""What a task's prompt says when it leaves that decision open (environments/tasks/conventions.py);
the other decision is stated in the prompt (a name task names the file), so it is not counted."""


def decision_rows(tokenizer: Any, groups: list[dict[str, Any]], wanted: dict[str, int]) -> dict[str, Any]:
    """Per decision (file, name): positions with a teacher row, rows holding the wanted token, rows
    where it is the first choice, and its mean probability in the rows that hold it."""
    import math

    out: dict[str, Any] = {}
    for kind, token in wanted.items():
        positions = held = first = 0
        probabilities: list[float] = []
        for group in groups:
            for seq, tokens in enumerate(group["tokens"]):
                if TASK_TEXT[kind] not in tokenizer.decode(tokens):
                    continue
                ids_rows = (group.get("distill_token_ids") or [None] * len(group["tokens"]))[seq] or []
                lp_rows = (group.get("distill_logprobs") or [None] * len(group["tokens"]))[seq] or []
                text = ""
                for position, token_id in enumerate(tokens):
                    before, text = text, text + tokenizer.decode([token_id])
                    if (
                        position >= len(ids_rows)
                        or not ids_rows[position]
                        or not before.endswith(DECISION_TEXT[kind])
                    ):
                        continue
                    positions += 1
                    ids, lps = ids_rows[position], lp_rows[position]
                    if token in ids:
                        held += 1
                        probabilities.append(math.exp(lps[ids.index(token)]))
                        first += int(max(range(len(ids)), key=lambda i: lps[i]) == ids.index(token))
        out[kind] = {
            "positions": positions,
            "held": held,
            "first_choice": first,
            "mean_probability": round(sum(probabilities) / len(probabilities), 3) if probabilities else None,
        }
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--rows"] and len(args) >= 5:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(args[1])
        wanted = {
            kind: tokenizer.encode(text, add_special_tokens=False)[0]
            for kind, text in zip(("file", "name"), args[2:4], strict=True)
        }
        for path in args[4:]:
            groups = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
            print(f"{path}: {json.dumps(decision_rows(tokenizer, groups, wanted))}")
        return 0
    if len(args) < 2:
        print(
            "usage: python -m hermes_opd.learning_study.transmission OUT.png BENCH_OUT_DIR...",
            file=sys.stderr,
        )
        return 2
    rows = []
    for directory in args[1:]:
        rows += run_rows(json.loads((Path(directory) / "learning.json").read_text()))
    print(table(rows))
    print(f"figure {figure(rows, Path(args[0]))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
