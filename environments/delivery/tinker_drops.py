"""What stock tinker-atropos would drop of our groups, and the one remedy we print for it (pure logic).

Stock tinker-atropos (docs/trainers.md, "What stock tinker-atropos drops") skips a group whose scores
are all equal before it reads the group's distill rows, and accepts exactly one distill entry per
position: `topk` rows with K > 1 are not for it. Two notices say so, both ending in `REMEDY`:

- `DenseK1Notice`: the env and `hermes-opd process` warn once per run, the first time a `dense_k1`
  group whose scores are all equal carries teacher rows (these OPD-only groups are exactly what OPD
  adds to GRPO; our own trainers train them);
- `TinkerDropCount`: `hermes-opd send` counts both kinds while it replays a file and warns once,
  with the numbers, at the end.

Scores are never changed to get past that filter.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hermes_opd.contract.constants import MODE_DENSE_K1
from hermes_opd.contract.provenance import parse_provenance, scored_positions

TRAIN_COMMAND = "hermes-opd train --config configs/trainer-tinker.yaml"
REMEDY = (
    f"train them with `{TRAIN_COMMAND}` (or configs/trainer-torch.yaml), which trains equal-score "
    "groups' OPD term and top-K rows; stock tinker-atropos takes distill rows only as "
    "`--env.distill_mode dense_k1` (one entry per position) and skips equal-score groups in any mode; "
    "docs/trainers.md"
)
"""The one remedy of both notices."""


def _has_rows(rows: Any) -> bool:
    return isinstance(rows, list) and any(isinstance(row, list) and row for row in rows)


def _widest_row(rows: Any) -> int:
    if not isinstance(rows, list):
        return 0
    return max((len(row) for row in rows if isinstance(row, list)), default=0)


@dataclass
class TinkerDropCount:
    """Groups (and what they carry) that stock tinker-atropos would not train on."""

    groups: int = 0
    """Groups looked at."""
    equal_score_groups: int = 0
    """Groups whose scores are all equal and that carry distill rows."""
    equal_score_positions: int = 0
    """Teacher positions (`scored_positions`) in those groups."""
    topk_wide_groups: int = 0
    """Groups with a distill row of more than one entry (topk mode, K > 1)."""
    widest_k: int = 0
    dropped_groups: int = 0
    """Groups of either kind (a group of both kinds counts once)."""

    def add(self, group: dict[str, Any]) -> None:
        """Count one group (already validated; a malformed group counts as nothing)."""
        self.groups += 1
        rows = group.get("distill_token_ids")
        if not isinstance(rows, list) or not any(_has_rows(seq_rows) for seq_rows in rows):
            return
        widest = max((_widest_row(seq_rows) for seq_rows in rows), default=0)
        scores = group.get("scores") or []
        equal_scores = bool(scores) and len(set(scores)) == 1
        self.dropped_groups += int(widest > 1 or equal_scores)
        if widest > 1:
            self.topk_wide_groups += 1
            self.widest_k = max(self.widest_k, widest)
        if equal_scores:
            self.equal_score_groups += 1
            for seq in range(len(group.get("tokens") or [])):
                with contextlib.suppress(TypeError, ValueError, IndexError, KeyError):
                    self.equal_score_positions += int(scored_positions(group, seq).sum())

    def warning(self) -> str | None:
        """One warning with the numbers, or None when stock tinker-atropos would take every group."""
        if not self.dropped_groups:
            return None
        parts = []
        if self.equal_score_groups:
            parts.append(
                f"{self.equal_score_groups} group(s) whose scores are all equal carry distill rows "
                f"({self.equal_score_positions} teacher positions): it skips them before reading the rows"
            )
        if self.topk_wide_groups:
            parts.append(
                f"{self.topk_wide_groups} group(s) carry top-K rows with K up to {self.widest_k}: it takes "
                "exactly one entry per position"
            )
        return (
            f"stock tinker-atropos would not train on {self.dropped_groups} of these {self.groups} groups: "
            + "; ".join(parts)
            + f". To keep them, {REMEDY}. Scores are sent unchanged."
        )


# -- the once-per-run notice of the env and `hermes-opd process` ----------------------------------
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
        f"so it drops these rows. To keep them, {REMEDY}. (Shown once per run.)"
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
