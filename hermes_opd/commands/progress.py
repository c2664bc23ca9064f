"""Per-group summaries and the batch job's progress display (a tqdm bar on a terminal, one plain
line per group otherwise, so that logs of unattended jobs stay readable)."""

from __future__ import annotations

import contextlib
import dataclasses
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any, TextIO

from hermes_opd.contract.constants import MASKED
from hermes_opd.contract.provenance import scored_positions


@dataclass
class GroupSummary:
    """What one ScoredDataGroup holds, in numbers a person reads."""

    sequences: int = 0
    scores: list[float] = field(default_factory=list)
    turns: int = 0
    judged_turns: int = 0
    """Turns that got judge votes."""
    hints: int = 0
    """Turns where the judge produced a hint."""
    scored_turns: int = 0
    tokens_scored: int = 0
    """Positions carrying teacher data (`hermes_opd.contract.provenance.scored_positions`)."""
    tokens_generated: int = 0
    tokens_total: int = 0

    @classmethod
    def of(cls, group: dict[str, Any]) -> GroupSummary:
        summary = cls(sequences=len(group.get("tokens") or []))
        summary.scores = [float(s) for s in group.get("scores") or []]
        for seq, tokens in enumerate(group.get("tokens") or []):
            summary.tokens_total += len(tokens)
            masks = (group.get("masks") or [])[seq] if seq < len(group.get("masks") or []) else []
            summary.tokens_generated += sum(1 for m in masks if m != MASKED)
            with contextlib.suppress(TypeError, ValueError, IndexError, KeyError):
                summary.tokens_scored += int(scored_positions(group, seq).sum())
        for override in group.get("overrides") or []:
            opd = (override or {}).get("opd") or {}
            for turn in opd.get("turns") or []:
                summary.turns += 1
                summary.judged_turns += int(turn.get("votes") is not None)
                summary.hints += int(bool(turn.get("hint")))
                summary.scored_turns += int(turn.get("status") == "scored")
        return summary


@dataclass
class RunTotals(GroupSummary):
    """Sums over the groups a run wrote: every `GroupSummary` count (scores concatenated), plus the
    number of groups."""

    groups: int = 0

    def add(self, summary: GroupSummary) -> None:
        self.groups += 1
        for f in dataclasses.fields(GroupSummary):
            mine, theirs = getattr(self, f.name), getattr(summary, f.name)
            if isinstance(mine, list):
                mine.extend(theirs)
            else:
                setattr(self, f.name, mine + theirs)

    @property
    def hint_rate(self) -> float:
        return self.hints / self.judged_turns if self.judged_turns else 0.0

    @property
    def mean_score(self) -> float:
        return statistics.fmean(self.scores) if self.scores else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "groups": self.groups,
            "sequences": self.sequences,
            "mean_score": round(self.mean_score, 4),
            "turns": self.turns,
            "judged_turns": self.judged_turns,
            "hints": self.hints,
            "hint_rate": round(self.hint_rate, 4),
            "scored_turns": self.scored_turns,
            "tokens_scored": self.tokens_scored,
            "tokens_generated": self.tokens_generated,
        }


def format_duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


class Progress:
    """Progress of a batch job over `target` groups, `done` of which already exist (resume).

    On a terminal: a tqdm bar (groups, rollouts, hints, tokens scored, ETA). Elsewhere (a log
    file, CI, a test's pipe): one line per finished group with the same numbers."""

    def __init__(self, target: int, done: int, stream: TextIO | None = None, mode: str = "auto") -> None:
        """`mode`: auto (a bar on a terminal, else lines), bar, lines or none (messages only)."""
        if mode not in ("auto", "bar", "lines", "none"):
            raise ValueError(f"progress mode must be auto, bar, lines or none, not {mode!r}")
        self.stream = stream or sys.stderr
        self.mode = mode
        self.target = target
        self.done_at_start = done
        self.done = done
        self.totals = RunTotals()
        self.started = time.monotonic()
        use_bar = mode == "bar" or (mode == "auto" and self.stream.isatty())
        self._bar = None
        if use_bar:
            from tqdm import tqdm

            self._bar = tqdm(
                total=target, initial=done, unit="group", file=self.stream, dynamic_ncols=True, smoothing=0.1
            )
            self._bar.set_postfix_str(self._postfix(), refresh=True)

    @property
    def has_bar(self) -> bool:
        return self._bar is not None

    def _postfix(self) -> str:
        t = self.totals
        return f"rollouts {t.sequences}, hints {t.hints}/{t.judged_turns}, tokens scored {t.tokens_scored:,}"

    def eta_s(self) -> float | None:
        made = self.done - self.done_at_start
        if made <= 0:
            return None
        rate = made / max(1e-9, time.monotonic() - self.started)
        return (self.target - self.done) / rate

    def groups_per_min(self) -> float:
        made = self.done - self.done_at_start
        return 60.0 * made / max(1e-9, time.monotonic() - self.started)

    def group_done(self, group_index: int, task_id: str, summary: GroupSummary, duration_s: float) -> None:
        self.done += 1
        self.totals.add(summary)
        if self._bar is not None:
            self._bar.set_postfix_str(self._postfix(), refresh=False)
            self._bar.update(1)
            return
        if self.mode == "none":
            return
        eta = self.eta_s()
        scores = ",".join(f"{s:.2f}" for s in summary.scores)
        print(
            f"[{self.done}/{self.target}] group {group_index} task {task_id}: scores {scores}; "
            f"hints {summary.hints}/{summary.judged_turns} turns; {summary.tokens_scored:,} tokens scored; "
            f"{duration_s:.1f}s | {self._postfix()}; {self.groups_per_min():.2f} groups/min; "
            f"ETA {format_duration(eta) if eta is not None else '?'}",
            file=self.stream,
            flush=True,
        )

    def still_waiting(self, in_flight: int, since: float) -> None:
        """Nothing finished for a while: the bar's clock moves on; without a bar, one line says
        what the job waits for (called every few seconds by the collection loop)."""
        if self._bar is not None:
            self._bar.refresh()
            return
        if self.mode == "none":
            return
        print(
            f"[{self.done}/{self.target}] collecting: {in_flight} group(s) in flight (rollouts, then the "
            f"judge and the teacher), none finished in the last {time.monotonic() - since:.0f} s",
            file=self.stream,
            flush=True,
        )

    def message(self, text: str) -> None:
        """A line that does not break the bar."""
        if self._bar is not None:
            self._bar.write(text, file=self.stream)
        else:
            print(text, file=self.stream, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
