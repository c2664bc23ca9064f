"""An experiment toward issue #43's proxy half: continue the shipped copying student (student_q2) for
one phase in which a share of the hints are corrections written as a person writes them, then save it.

Why (docs/recipes/learning-bench.md, "Through the proxy"): told a function's name and not its file, the
shipped student's hinted teacher may write the name where the file goes, so the live user's name
corrections pull every attempt's file away from the one the prompt names, and the live loop's student
stops writing files. The student's recipe (hermes_opd/learning_study/student_recipe.py) only ever
showed it hints in the rules judge's words and four short instructions that name one value; a
correction that names a prefix and a function, and never the file, is new to it.

The phase: the recipe's own rows and loop (`Phase`, `recipe_corpus`, `train_phase`), from student_q2's
weights, 300 steps (about 5 minutes on one core) at lr 3e-4, with `student_corpus._hint` replaced for
the run by `correction_hint`: 40 % the recipe's own hint, 60 % one of the corrections below. They were
written for this experiment, not taken from the live bench's user (hermes_opd/learning_study/
live_user.py), whose phrasings stay unseen; the values are the corpus's own words, never the
convention tasks' (the recipe's exclusion). The result is not shipped: it is a measurement.

    python scripts/student_corrections_experiment.py /tmp/student-q2c
    HERMES_OPD_CONVENTION=compute,utils python -m hermes_opd.learning_study.divergence_probe --model /tmp/student-q2c
    hermes-opd bench live --quick --student-model /tmp/student-q2c --lr 1e-3 \\
        --config hermes_opd/learning_study/configs/live-quick-transmission.yaml --out runs/live-q2c
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import time
from pathlib import Path

import hermes_opd.learning_study.student_corpus as student_corpus
from environments.atropos.agentic_opd_config import AgenticOPDConfig
from environments.rollout.tools import TOOL_SCHEMAS
from environments.tasks.conventions import convention_values
from hermes_opd.learning_study.paths import shipped_student_dir
from hermes_opd.learning_study.student_recipe import Phase, recipe_corpus, train_phase

RECIPE_HINT = student_corpus._hint
RECIPE_SHARE = 0.4
"""The share of hinted rows that keep the recipe's own hint; the rest get a correction."""

NAME_CORRECTIONS = (
    "Close, but the function should be called `{function}`.",
    "Please call it `{function}` instead.",
    "Naming: we use `{verb}_` for these, so `{function}`.",
    "That name doesn't match ours; here it is `{function}`.",
    "Rename it: `{verb}_` is the prefix we use, which makes it `{function}`.",
    "Not that name. Every function here begins with `{verb}_`; this one is `{function}`.",
    "Hmm, we'd call this `{function}` (the `{verb}_` prefix).",
)
MODULE_CORRECTIONS = (
    "Wrong place, this belongs in `{module}.py`.",
    "We keep code like this in `{module}.py`, please move it.",
    "Put it in `{module}.py`, not where it is now.",
    "Our functions all live in `{module}.py`.",
    "Not that file; the project uses `{module}.py` for these.",
    "Hmm, `{module}.py` is where this goes.",
)


def correction_hint(rng: random.Random, kind: str, function: str, module: str) -> str:
    """The recipe's hint, or a person's correction naming the same value."""
    if rng.random() < RECIPE_SHARE:
        return RECIPE_HINT(rng, kind, function, module)
    forms = NAME_CORRECTIONS if kind == "name" else MODULE_CORRECTIONS
    return rng.choice(forms).format(function=function, verb=function.split("_", 1)[0], module=module)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="where to write the continued student (replaced)")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--lr", type=float, default=3e-4)
    args = parser.parse_args(argv)

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(shipped_student_dir(), out)
    (out / "student_model.json").unlink()  # not the shipped build any more
    torch.set_num_threads(1)
    tokenizer = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    model.train()
    phase = Phase(
        "corrections",
        steps=args.steps,
        conv=16,
        choice=8,
        drill=8,
        induct=8,
        hint_rate=0.6,
        seed=11,
        lr=args.lr,
        pseudo=3000,
        verbatim=True,
    )
    corpus = recipe_corpus(
        tokenizer,
        TOOL_SCHEMAS,
        AgenticOPDConfig.model_fields["system_prompt"].default,
        frozenset(convention_values()),
        phase,
    )
    torch.manual_seed(phase.seed)
    started = time.monotonic()

    def report(step: int, steps: int, losses: dict[str, float]) -> None:
        if step % 25 == 0 or step == steps:
            shown = " ".join(f"{kind} {value:.3f}" for kind, value in losses.items())
            print(
                f"step {step}/{steps}: {shown} ({time.monotonic() - started:.0f}s)",
                file=sys.stderr,
                flush=True,
            )

    student_corpus._hint = correction_hint  # pretrain_example looks it up at each call
    try:
        train_phase(model, corpus, report)
    finally:
        student_corpus._hint = RECIPE_HINT
    model.eval()
    model.save_pretrained(out, safe_serialization=True)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
