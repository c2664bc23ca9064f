"""Count the groups of a file that stock tinker-atropos would drop, for one warning (pure logic).

Stock tinker-atropos (docs/trainers.md, "What stock tinker-atropos drops") skips a group whose scores
are all equal before it reads the group's distill rows, and accepts exactly one distill entry per
position: `topk` rows with K > 1 are not for it. `hermes-opd send` counts both kinds while it
replays a file and warns once, with the numbers, at the end. Scores are never changed to get past
that filter: the remedy is `distill_mode: dense_k1` when collecting, or `hermes-opd train`.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from hermes_opd.contract.provenance import scored_positions

KEEPERS = (
    "collect with `--env.distill_mode dense_k1` (one entry per position) for stock tinker-atropos, or "
    "train with `hermes-opd train` (configs/trainer-torch.yaml or configs/trainer-tinker.yaml), which "
    "trains equal-score groups' OPD term and top-K rows; docs/trainers.md"
)


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
            + f". To keep them, {KEEPERS}. Scores are sent unchanged."
        )
