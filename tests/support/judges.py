"""Scripted judges for the env tests."""

from __future__ import annotations

from judge.parsing import Vote


class AlwaysHintJudge:
    """A judge that always votes +1 with a fixed hint: isolates teacher scoring from judge behaviour."""

    name = "always"

    def __init__(self, m: int = 3) -> None:
        self.m = m

    async def collect_votes(self, pair):
        text = "\\boxed{1} [HINT_START]Write solution.py first, then run the tests.[HINT_END]"
        return [Vote(score=1, hint="Write solution.py first, then run the tests.", raw=text)] * self.m

    async def aclose(self):
        return None


HINTS = (
    "Write solution.py first, then run the tests.",
    "Read the failing assertion and fix that case only.",
    "Run python -m pytest -q before you answer.",
)


class ThreeHintsJudge:
    name = "three-hints"

    async def collect_votes(self, pair):
        return [Vote(score=1, hint=h, raw=f"\\boxed{{1}} [HINT_START]{h}[HINT_END]") for h in HINTS]

    async def aclose(self):
        return None
