"""`hermes-opd dev-model build-student`: pretrain the learnable dev student for the env.

Three recipes (`--recipe`): "conversations" (hermes_opd/learning_study/student_model.py), "copy"
(hermes_opd/learning_study/student_recipe.py, induction first) and "corrections" (the shipped copy
student continued on a person's corrections, student_recipe.CORRECTIONS_PHASE). Each builder is given the env's system
prompt and tool schemas, so the student learns exactly the rendering the env's rollouts use, and
the values of the convention task family (environments/tasks/conventions.py), which its pretraining
must never contain.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from environments.atropos.agentic_opd_config import AgenticOPDConfig
from environments.rollout.tools import TOOL_SCHEMAS
from environments.tasks.conventions import convention_values
from hermes_opd.learning_study.paths import default_student_dir, shipped_student_dir
from hermes_opd.learning_study.student_model import (
    StudentSpec,
    build_student,
    is_student_built,
    weights_sha256,
)
from hermes_opd.learning_study.student_recipe import (
    build_corrections_student,
    build_recipe_student,
    corrections_manifest,
    recipe_manifest,
)

RECIPES = ("conversations", "copy", "corrections")
"""conversations: `build_student` (minutes; follows the tool format, does not copy unseen names);
copy: `student_recipe.COPY_RECIPE` (induction first; about 50 minutes on one core; docs/notes/learning-lab.md);
corrections: the shipped copy student (student_q2) continued for `student_recipe.CORRECTIONS_PHASE`
(about 5 minutes on one core)."""


def build_student_for_env(
    out_dir: str | Path | None, *, seed: int = 0, if_missing: bool = False, recipe: str = "conversations"
) -> int:
    if recipe not in RECIPES:
        raise ValueError(f"unknown student recipe {recipe!r}; known: {', '.join(RECIPES)}")
    if recipe != "conversations" and seed != 0:
        print(
            f"build-student: the {recipe} recipe's phases carry their own seeds; --seed is for 'conversations'",
            file=sys.stderr,
        )
        return 2
    out = Path(out_dir) if out_dir else default_student_dir()
    expected = None  # what the manifest must hold: a build of an older recipe is rebuilt
    if recipe == "copy":
        expected = recipe_manifest()
    elif recipe == "corrections":  # hashes the base's weights: only for this recipe
        expected = corrections_manifest(weights_sha256(shipped_student_dir()))
    if if_missing and is_student_built(out, recipe, expected):
        print(f"student already built at {out}")
        return 0
    started = time.monotonic()

    def phase_progress(phase: str, step: int, steps: int, losses: dict[str, float]) -> None:
        if step % 25 == 0 or step == steps:
            shown = " ".join(f"{kind} {value:.3f}" for kind, value in losses.items())
            print(
                f"{phase} step {step}/{steps}: {shown} ({time.monotonic() - started:.0f}s)",
                file=sys.stderr,
                flush=True,
            )

    def progress(step: int, steps: int, loss: float) -> None:  # the conversations build: one loss
        phase_progress("pretraining", step, steps, {"loss": loss})

    common = {
        "tools": TOOL_SCHEMAS,
        "system_prompt": AgenticOPDConfig.model_fields["system_prompt"].default,
        "excluded_values": frozenset(convention_values()),
    }
    if recipe == "copy":
        build_recipe_student(out, **common, progress=phase_progress)
    elif recipe == "corrections":
        build_corrections_student(out, base_dir=shipped_student_dir(), **common, progress=phase_progress)
    else:
        build_student(out, **common, spec=StudentSpec(seed=seed), progress=progress)
    print(f"student written to {out}")
    return 0
