"""Judge one turn pair: collect the votes, apply the vote policy, time it. `judge_turn` is the hint
judge's, `judge_process_turn` the process-reward judge's (a +1 / -1 / 0 score)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from hermes_opd.record.turn_pairs import TurnPair
from judge.backends import JudgeBackend, JudgeError
from judge.config import JudgeConfig
from judge.parsing import Vote
from judge.votes import ProcessOutcome, VoteOutcome, decide_process_votes, decide_votes


@dataclass(frozen=True)
class JudgeResult:
    """What the judge said about one turn."""

    outcome: VoteOutcome
    votes: list[Vote]
    latency_s: float
    backend: str

    @property
    def accepted(self) -> bool:
        return self.outcome.accepted

    @property
    def hint(self) -> str | None:
        return self.outcome.hint

    def as_dict(self) -> dict[str, Any]:
        """Vote summary plus latency and backend, for provenance and metrics."""
        return {
            **self.outcome.as_dict(),
            "backend": self.backend,
            "latency_s": round(self.latency_s, 4),
            "failed_requests": sum(1 for v in self.votes if v.failed),
        }


@dataclass(frozen=True)
class ProcessJudgeResult:
    """What the process-reward judge said about one turn."""

    outcome: ProcessOutcome
    votes: list[Vote]
    latency_s: float
    backend: str

    @property
    def score(self) -> int:
        return self.outcome.score

    def as_dict(self) -> dict[str, Any]:
        """Vote summary plus latency and backend, for provenance and metrics."""
        return {**self.outcome.as_dict(), "backend": self.backend, "latency_s": round(self.latency_s, 4)}


async def _timed_votes(pair: TurnPair, backend: JudgeBackend) -> tuple[list[Vote], float]:
    if not pair.has_next_state:
        raise ValueError(f"turn {pair.turn_index} has no next state; it cannot be judged")
    started = time.perf_counter()
    try:
        votes = await backend.collect_votes(pair)
    except JudgeError as error:
        error.latency_s = time.perf_counter() - started
        raise
    return list(votes), time.perf_counter() - started


async def judge_process_turn(
    pair: TurnPair, backend: JudgeBackend, config: JudgeConfig
) -> ProcessJudgeResult:
    """Run the process backend's m votes on `pair`: the score with a strict majority, else 0
    (`decide_process_votes` with `config.vote_policy` and `config.quorum`). Raises as `judge_turn`."""
    votes, latency_s = await _timed_votes(pair, backend)
    outcome = decide_process_votes(votes, config.vote_policy, requested=config.m, quorum=config.quorum)
    return ProcessJudgeResult(outcome=outcome, votes=votes, latency_s=latency_s, backend=backend.name)


async def judge_turn(pair: TurnPair, backend: JudgeBackend, config: JudgeConfig) -> JudgeResult:
    """Run the backend's m votes on `pair` and decide with `config.vote_policy`/`config.hint_choice`.

    Raises ValueError for a pair without a next state (there is nothing to judge it by), and
    `JudgeError` (with `latency_s` set) when every vote's request failed.
    """
    votes, latency_s = await _timed_votes(pair, backend)
    outcome = decide_votes(
        votes, config.vote_policy, config.hint_choice, requested=config.m, quorum=config.quorum
    )
    return JudgeResult(outcome=outcome, votes=votes, latency_s=latency_s, backend=backend.name)
