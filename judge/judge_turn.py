"""Judge one turn pair: collect the votes, apply the vote policy, time it."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from hermes_opd.record.turn_pairs import TurnPair
from judge.backends import JudgeBackend, JudgeError
from judge.config import JudgeConfig
from judge.parsing import Vote
from judge.votes import VoteOutcome, decide_votes


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


async def judge_turn(pair: TurnPair, backend: JudgeBackend, config: JudgeConfig) -> JudgeResult:
    """Run the backend's m votes on `pair` and decide with `config.vote_policy`/`config.hint_choice`.

    Raises ValueError for a pair without a next state (there is nothing to judge it by), and
    `JudgeError` (with `latency_s` set) when every vote's request failed.
    """
    if not pair.has_next_state:
        raise ValueError(f"turn {pair.turn_index} has no next state; it cannot be judged")
    started = time.perf_counter()
    try:
        votes = await backend.collect_votes(pair)
    except JudgeError as error:
        error.latency_s = time.perf_counter() - started
        raise
    latency_s = time.perf_counter() - started
    outcome = decide_votes(
        votes, config.vote_policy, config.hint_choice, requested=config.m, quorum=config.quorum
    )
    return JudgeResult(outcome=outcome, votes=list(votes), latency_s=latency_s, backend=backend.name)
