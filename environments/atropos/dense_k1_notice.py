"""A once-per-run warning for `dense_k1` groups that stock tinker-atropos would drop (pure logic).

Stock tinker-atropos skips a group whose scores are all equal BEFORE it reads the group's distill
data, so in `distill_mode: dense_k1` every teacher row of such a group is lost there, although
these OPD-only groups are exactly what OPD adds to GRPO. Our own trainers train them. The warning
says how many teacher positions the first such group carries and where to train them instead.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import Any

from hermes_opd.contract.constants import MODE_DENSE_K1
from hermes_opd.contract.provenance import parse_provenance, scored_positions

TRAIN_COMMAND = "hermes-opd train --config configs/trainer-tinker.yaml"


def equal_score_teacher_positions(group: dict[str, Any]) -> int:
    """Teacher positions (`scored_positions`: generated tokens of `scored` turns) of a `dense_k1`
    group whose scores are all equal; 0 for any other group."""
    scores = group.get("scores") or []
    if not scores or len(set(scores)) > 1:
        return 0
    positions = 0
    for seq in range(len(group.get("tokens") or [])):
        with contextlib.suppress(TypeError, ValueError, IndexError, KeyError):
            if parse_provenance(group["overrides"][seq].get("opd")).mode == MODE_DENSE_K1:
                positions += int(scored_positions(group, seq).sum())
    return positions


def dense_k1_warning(positions: int, scores: list[float]) -> str:
    return (
        f"distill_mode dense_k1: a group whose scores are all equal ({scores[0]:g}) carries {positions} "
        "teacher positions. Stock tinker-atropos skips equal-score groups before it reads distill data, "
        f"so it drops these rows. Train such groups with `{TRAIN_COMMAND}` (or the torch trainer), which "
        "reads dense_k1 groups and trains their OPD term; docs/trainers.md. (Shown once per run.)"
    )


class DenseK1Notice:
    """Warns the first time a group of the run is an equal-score dense_k1 group with teacher rows."""

    def __init__(self, emit: Callable[[str], None] | None = None) -> None:
        self.emit = emit or logging.getLogger(__name__).warning
        self.warned = False

    def check(self, group: dict[str, Any] | None) -> str | None:
        """The warning, the first time it applies in this run (and emitted); None otherwise. Never
        raises: a malformed group is the validator's business, not this notice's."""
        if self.warned or not group:
            return None
        try:
            positions = equal_score_teacher_positions(group)
        except Exception:  # noqa: BLE001 - a notice must never fail the group it looks at
            return None
        if not positions:
            return None
        self.warned = True
        message = dense_k1_warning(positions, list(group["scores"]))
        self.emit(message)
        return message
