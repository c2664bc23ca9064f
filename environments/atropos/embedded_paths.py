"""Where the embedded default looks for its model: `AgenticOPDEnv.config_init` serves the dev model
from the artefact cache, and the dev kit (hermes_opd/devkit/) builds it there. Overridable by
environment."""

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
