"""Where the tests find the repository and its configs."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LOCAL_CPU = REPO / "configs" / "local-cpu.yaml"
