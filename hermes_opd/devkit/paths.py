"""Default locations for generated artefacts (dev model, logs), overridable by environment."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """`$HERMES_OPD_CACHE`, else `.cache/` in the current directory."""
    return Path(os.environ.get("HERMES_OPD_CACHE", Path.cwd() / ".cache"))


def default_dev_model_dir() -> Path:
    """`$HERMES_OPD_DEV_MODEL`, else `<cache>/dev-model`."""
    env = os.environ.get("HERMES_OPD_DEV_MODEL")
    return Path(env) if env else cache_dir() / "dev-model"


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
