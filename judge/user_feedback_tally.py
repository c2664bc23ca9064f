"""How many user replies a rules backend read as each kind (judge/user_feedback.py), above all how
many it could NOT read: such a reply is neither a hint nor a reward, and this count is where it shows.

Each rules backend (judge/rules_backend.py, judge/prm_rules_backend.py) holds one, as
`backend.feedback_tally`; `as_metrics()` gives flat counters for a metrics dict, e.g.
`judge/user_feedback_unread`. The counts only grow (one per user reply of each judged turn)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from judge.user_feedback import READINGS, Reading

METRIC_PREFIX = "judge/user_feedback_"


@dataclass
class FeedbackTally:
    """Counts of readings, one per user reply read."""

    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(READINGS, 0))

    def record(self, readings: Iterable[Reading]) -> None:
        for kind in readings:
            self.counts[kind] = self.counts.get(kind, 0) + 1

    @property
    def unread(self) -> int:
        return self.counts.get("unread", 0)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def as_metrics(self, prefix: str = METRIC_PREFIX) -> dict[str, int]:
        """`{prefix}redo`, `{prefix}correction`, `{prefix}acceptance`, `{prefix}unread`, `{prefix}read`
        (all replies read)."""
        return {**{f"{prefix}{kind}": n for kind, n in self.counts.items()}, f"{prefix}read": self.total}
