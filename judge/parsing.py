"""Parse one judge answer into a `Vote` (pure logic).

Rules, in order:
1. Thinking is removed first: every complete `<think>...</think>` block; then, if a `</think>` is
   left without its opening tag (templates that put `<think>` in the prompt), everything up to it;
   then, if a `<think>` is left unclosed, everything from it to the end. An answer that is only
   thinking is unparsed, so a `\\boxed{1}` inside thinking never counts.
2. The score is the LAST `\\boxed{...}` of what remains, and only `1`/`+1`/`-1` count; any other last
   value (`0`, `2`, `yes`) leaves the vote unparsed rather than falling back to an earlier box.
3. The hint is the LAST complete `[HINT_START] ... [HINT_END]` block, wherever it is (before or after
   the box). An unclosed block gives no hint. A hint shorter than `min_hint_chars` after stripping
   whitespace gives no hint.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

HINT_START = "[HINT_START]"
HINT_END = "[HINT_END]"

_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</think>", re.IGNORECASE)
_THINK_OPEN = re.compile(r"<think>", re.IGNORECASE)
_BOXED = re.compile(r"\\boxed\s*\{\s*([^{}]*?)\s*\}")
_HINT_BLOCK = re.compile(
    re.escape(HINT_START) + r"((?:(?!" + re.escape(HINT_START) + r").)*?)" + re.escape(HINT_END),
    re.DOTALL | re.IGNORECASE,
)
_SCORES = {"1": 1, "+1": 1, "-1": -1, "\u22121": -1}  # U+2212 is the typographic minus sign


@dataclass(frozen=True)
class Vote:
    """One judge answer: score +1/-1 or None (unparsed), the hint if any, and the raw text."""

    score: int | None
    hint: str | None
    raw: str
    error: str | None = None
    """Set when the request itself failed (no text came back); such a vote counts as unparsed."""

    @property
    def parsed(self) -> bool:
        return self.score is not None

    @property
    def failed(self) -> bool:
        return self.error is not None

    @classmethod
    def failure(cls, error: str) -> Vote:
        return cls(score=None, hint=None, raw="", error=error)


def strip_thinking(text: str) -> str:
    """The answer without its thinking (empty when the answer is all thinking)."""
    text = _THINK_BLOCK.sub("", text)
    closes = list(_THINK_CLOSE.finditer(text))
    if closes:
        text = text[closes[-1].end() :]
    opened = _THINK_OPEN.search(text)
    if opened:
        text = text[: opened.start()]
    return text


def last_boxed_score(text: str) -> int | None:
    """+1/-1 from the last `\\boxed{...}`; None if there is none or it holds anything else."""
    matches = _BOXED.findall(text)
    if not matches:
        return None
    return _SCORES.get(matches[-1].strip())


def last_hint(text: str, min_hint_chars: int = 10) -> str | None:
    """The stripped text of the last complete hint block, if it is long enough."""
    blocks = _HINT_BLOCK.findall(text)
    if not blocks:
        return None
    hint = blocks[-1].strip()
    if not hint or len(hint) < min_hint_chars:
        return None
    return hint


def parse_vote(text: str | None, min_hint_chars: int = 10) -> Vote:
    """Parse one judge answer (see the module docstring for the rules)."""
    raw = text or ""
    answer = strip_thinking(raw)
    if not answer.strip():
        return Vote(score=None, hint=None, raw=raw)
    return Vote(score=last_boxed_score(answer), hint=last_hint(answer, min_hint_chars), raw=raw)
