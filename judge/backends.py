"""What a judge backend is (the protocol every backend implements) and its error."""

from __future__ import annotations

from typing import Literal, Protocol, runtime_checkable

from hermes_opd.contract.errors import HermesOPDError
from hermes_opd.record.turn_pairs import TurnPair
from judge.parsing import Vote

JudgeKind = Literal["hint", "prm"]
"""What a judge is asked: `hint` (judge/prompt.py: can the turn be improved, and how) or `prm`, the
process-reward judge (judge/prm_prompt.py: was the turn good, bad or neither)."""


class JudgeError(HermesOPDError, RuntimeError):
    """No vote of a turn could be obtained (every request failed). The caller counts it and moves on."""

    def __init__(self, message: str, errors: list[str] | None = None) -> None:
        super().__init__(message)
        self.errors: list[str] = list(errors or [])
        self.latency_s: float | None = None
        """Set by `judge_turn`: how long the failed attempt took."""


@runtime_checkable
class JudgeBackend(Protocol):
    """Produces the m votes for one turn pair."""

    name: str

    async def collect_votes(self, pair: TurnPair) -> list[Vote]:
        """Exactly `config.m` votes. A vote whose request failed comes back as `Vote.failure(...)`
        (counted as unparsed); when every request failed, raise `JudgeError` instead."""
        ...

    async def aclose(self) -> None:
        """Release connections; the backend is not used afterwards."""
        ...
