"""Default locations of the dev kit's other artefacts (the Qwen3 dev model, the students), overridable by
environment; the dev model's own default is the embedded env's (environments/atropos/embedded_paths.py)."""

from __future__ import annotations

import os
from pathlib import Path

from environments.atropos.embedded_paths import cache_dir


def default_qwen3_dev_model_dir() -> Path:
    """`$HERMES_OPD_DEV_MODEL_QWEN3`, else `<cache>/dev-model-qwen3` (`dev-model build --architecture
    qwen3`: the model the local Tinker-API server and its vLLM share)."""
    env = os.environ.get("HERMES_OPD_DEV_MODEL_QWEN3")
    return Path(env) if env else cache_dir() / "dev-model-qwen3"


def default_student_dir() -> Path:
    """`$HERMES_OPD_STUDENT`, else `<cache>/dev-student`."""
    env = os.environ.get("HERMES_OPD_STUDENT")
    return Path(env) if env else cache_dir() / "dev-student"


def shipped_student_dir() -> Path:
    """The copying student that ships with the project (`hermes_opd/devkit/student_q2`, built by
    `hermes-opd dev-model build-student DIR --recipe copy`; see `hermes_opd/devkit/STUDENT_Q2.md`)."""
    return Path(__file__).resolve().parent / "student_q2"
