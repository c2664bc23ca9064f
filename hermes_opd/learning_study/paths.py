"""Where the learning study's artefacts are: the shipped copying student, the default directory of a
student built locally, and the study's bench configs (package data, so `hermes-opd demo` finds its
config in an installed package too)."""

from __future__ import annotations

import os
from pathlib import Path

from environments.atropos.embedded_paths import cache_dir

PACKAGE_DIR = Path(__file__).resolve().parent
CONFIG_DIR = PACKAGE_DIR / "configs"
"""The learning bench's configs (`hermes-opd bench learning --config ...`; README.md here)."""


def default_student_dir() -> Path:
    """`$HERMES_OPD_STUDENT`, else `<cache>/dev-student`."""
    env = os.environ.get("HERMES_OPD_STUDENT")
    return Path(env) if env else cache_dir() / "dev-student"


def shipped_student_dir() -> Path:
    """The copying student that ships with the project (`hermes_opd/learning_study/student_q2`, built by
    `hermes-opd dev-model build-student DIR --recipe copy`; see `hermes_opd/learning_study/STUDENT_Q2.md`)."""
    return PACKAGE_DIR / "student_q2"
