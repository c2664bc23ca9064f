"""Where the learning study's artefacts are: the shipped copying students, the default directory of a
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


def shipped_corrections_student_dir() -> Path:
    """The shipped student continued on a person's corrections (`hermes_opd/learning_study/student_q2c`,
    built by `hermes-opd dev-model build-student DIR --recipe corrections` from `shipped_student_dir()`):
    the live bench's transmission test's student (STUDENT_Q2.md)."""
    return PACKAGE_DIR / "student_q2c"


SHIPPED_STUDENTS = ("student_q2", "student_q2c")
"""The students committed in this package: a bench's `student_model` may name one instead of a path."""


def student_model_dir(value: str | Path) -> Path:
    """A bench's `student_model`: one of `SHIPPED_STUDENTS` by name (so a config works from any
    directory, and from an installed package), else a path as given."""
    return PACKAGE_DIR / str(value) if str(value) in SHIPPED_STUDENTS else Path(value)
