"""`hermes-opd dev-model build-student`: pretrain the learnable dev student for the env.

The builder (hermes_opd/devkit/student_model.py) is given the env's system prompt and tool schemas,
so the student learns exactly the rendering the env's rollouts use, and the values of the convention
task family (environments/tasks/conventions.py), which its pretraining must never contain.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from environments.atropos.agentic_opd_config import AgenticOPDConfig
from environments.rollout.tools import TOOL_SCHEMAS
from environments.tasks.conventions import convention_values
from hermes_opd.devkit.paths import default_student_dir
from hermes_opd.devkit.student_model import StudentSpec, build_student, is_student_built


def build_student_for_env(out_dir: str | Path | None, *, seed: int = 0, if_missing: bool = False) -> int:
    out = Path(out_dir) if out_dir else default_student_dir()
    if if_missing and is_student_built(out):
        print(f"student already built at {out}")
        return 0
    started = time.monotonic()

    def progress(step: int, steps: int, loss: float) -> None:
        if step % 25 == 0 or step == steps:
            elapsed = time.monotonic() - started
            print(
                f"pretraining step {step}/{steps}: loss {loss:.3f} ({elapsed:.0f}s)",
                file=sys.stderr,
                flush=True,
            )

    build_student(
        out,
        tools=TOOL_SCHEMAS,
        system_prompt=AgenticOPDConfig.model_fields["system_prompt"].default,
        excluded_values=frozenset(convention_values()),
        spec=StudentSpec(seed=seed),
        progress=progress,
    )
    print(f"student written to {out}")
    return 0
