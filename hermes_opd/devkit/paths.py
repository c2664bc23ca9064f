"""Default location of the dev kit's other artefact (the Qwen3 dev model), overridable by environment
(the students' are the learning study's: hermes_opd/learning_study/paths.py); the dev model's own default is the embedded env's (environments/atropos/embedded_paths.py)."""

from __future__ import annotations

import os
from pathlib import Path

from environments.atropos.embedded_paths import cache_dir


def default_qwen3_dev_model_dir() -> Path:
    """`$HERMES_OPD_DEV_MODEL_QWEN3`, else `<cache>/dev-model-qwen3` (`dev-model build --architecture
    qwen3`: the model the local Tinker-API server and its vLLM share)."""
    env = os.environ.get("HERMES_OPD_DEV_MODEL_QWEN3")
    return Path(env) if env else cache_dir() / "dev-model-qwen3"
