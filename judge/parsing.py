"""Parse one judge answer into a `Vote` (pure logic).

Rules, in order:
1. Thinking is removed first: every complete `<think>...</think>` block; then, if a `</think>` is
   left without its opening tag (templates that put `<think>` in the prompt), everything up to it;
   then, if a `<think>` is left unclosed, everything from it to the end. An answer that is only
   thinking is unparsed, so a `\\boxed{1}` inside thinking never counts.
2. The hint is the LAST complete `[HINT_START] ... [HINT_END]` block, wherever it is (before or after
   the box). An unclosed block gives no hint. A hint shorter than `min_hint_chars` (default 11: more
   than 10 characters, the reference's rule) after stripping whitespace gives no hint.
3. The score is read from the LAST `\\boxed{...}` outside the complete hint blocks (a hint that quotes
   a box cannot change the verdict). The box's argument runs to its matching brace, so nested braces
   are read whole: `\\boxed{\\text{-1}}` is -1. Inside, spaces are ignored and `\\text{...}`
   wrappers are unwrapped; then only `1`, `+1`, `-1` (or U+2212 minus) count. Any other last value
   (`0`, `2`, `yes`, `{1}`, `\\mathbf{1}`) leaves the vote unparsed rather than falling back to an
   earlier box, and so does a `\\boxed{` whose braces never close (the verdict was cut off).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

HINT_START = "[HINT_START]"
HINT_END = "[HINT_END]"

# The markers the parser reads, each defined once. The parser's compound patterns below are built from
# these, and `defuse_markers` neutralises exactly these, so the two cannot disagree on case, on
# Unicode case folding (`re.IGNORECASE` matches U+0131 dotless i and U+017F long s as `i` and `s`)
# or on spacing.
_HINT_START_MARK = re.compile(re.escape(HINT_START), re.IGNORECASE)
_HINT_END_MARK = re.compile(re.escape(HINT_END), re.IGNORECASE)
_THINK_OPEN = re.compile(r"<think>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</think>", re.IGNORECASE)
_BOXED_NAME = re.compile(r"\\boxed")
ANSWER_MARKERS: tuple[re.Pattern[str], ...] = (
    _HINT_START_MARK,
    _HINT_END_MARK,
    _THINK_OPEN,
    _THINK_CLOSE,
    _BOXED_NAME,
)
"""Every marker `parse_vote` and `parse_process_vote` read. A box is neutralised at its name, so a
brace that only follows it later (a quote that ends in `\\boxed`, then `{1}`) opens nothing."""

_THINK_BLOCK = re.compile(
    _THINK_OPEN.pattern + r".*?" + _THINK_CLOSE.pattern, re.DOTALL | _THINK_OPEN.flags | _THINK_CLOSE.flags
)
_BOXED_OPEN = re.compile(_BOXED_NAME.pattern + r"\s*\{", _BOXED_NAME.flags)
_TEXT_WRAPPER = re.compile(r"^\\text\{(.*)\}$", re.DOTALL)
_WHITESPACE = re.compile(r"\s+")
_HINT_BLOCK = re.compile(
    _HINT_START_MARK.pattern + r"((?:(?!" + _HINT_START_MARK.pattern + r").)*?)" + _HINT_END_MARK.pattern,
    re.DOTALL | _HINT_START_MARK.flags | _HINT_END_MARK.flags,
)
_SCORES = {"1": 1, "+1": 1, "-1": -1, "\u22121": -1}  # U+2212 is the typographic minus sign
PROCESS_SCORES = {**_SCORES, "0": 0, "+0": 0, "-0": 0, "\u22120": 0}
"""The process-reward judge's verdicts (judge/prm_prompt.py): the hint judge's two plus 0, neutral."""


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


def _break(match: re.Match[str]) -> str:
    marker = match.group(0)
    return marker[0] + " " + marker[1:]


def defuse_markers(text: str) -> str:
    """`text` with every answer marker in it made unreadable to this parser: a space after the
    marker's first character (`\\boxed` -> `\\ boxed`, `[Hint_END]` -> `[ Hint_END]`, `</think>`
    -> `< /think>`). It matches with the parser's own patterns (`ANSWER_MARKERS`), so any case or
    case-folded spelling the parser would read is caught. Defuse text after it is joined, not piece
    by piece: a marker split across two pieces only forms when they meet."""
    for marker in ANSWER_MARKERS:
        text = marker.sub(_break, text)
    return text


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


def _group_end(text: str, start: int) -> int | None:
    """Index just past the brace that closes the group opened right before `start`; None if it
    never closes. `\\{` and `\\}` are literal braces, not group delimiters."""
    depth = 1
    i = start
    while i < len(text):
        char = text[i]
        if char == "\\":
            i += 2
            continue
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return None


def boxed_value(argument: str, scores: dict[str, int] = _SCORES) -> int | None:
    """+1/-1 (or any value of `scores`) for a box's argument: spaces ignored, `\\text{...}` unwrapped;
    None for anything else."""
    value = _WHITESPACE.sub("", argument)
    while (wrapped := _TEXT_WRAPPER.match(value)) and _group_end(value, len("\\text{")) == len(value):
        value = wrapped.group(1)
    return scores.get(value)


def last_boxed_score(text: str, scores: dict[str, int] = _SCORES) -> int | None:
    """+1/-1 (or any value of `scores`) from the last `\\boxed{...}`; None if there is none, it never
    closes, or it holds anything else."""
    argument: str | None = None
    position = 0
    while (opened := _BOXED_OPEN.search(text, position)) is not None:
        end = _group_end(text, opened.end())
        if end is None:
            return None
        argument = text[opened.end() : end - 1]
        position = end  # a box nested in this one's argument is part of the argument
    return None if argument is None else boxed_value(argument, scores)


def without_hint_blocks(text: str) -> str:
    """`text` with every complete hint block removed."""
    return _HINT_BLOCK.sub(" ", text)


def last_hint(text: str, min_hint_chars: int = 11) -> str | None:
    """The stripped text of the last complete hint block, if it is long enough."""
    blocks = _HINT_BLOCK.findall(text)
    if not blocks:
        return None
    hint = blocks[-1].strip()
    if not hint or len(hint) < min_hint_chars:
        return None
    return hint


def parse_vote(text: str | None, min_hint_chars: int = 11) -> Vote:
    """Parse one judge answer (see the module docstring for the rules)."""
    raw = text or ""
    answer = strip_thinking(raw)
    if not answer.strip():
        return Vote(score=None, hint=None, raw=raw)
    return Vote(
        score=last_boxed_score(without_hint_blocks(answer)),
        hint=last_hint(answer, min_hint_chars),
        raw=raw,
    )


def parse_process_vote(text: str | None) -> Vote:
    """One process-reward answer (judge/prm_prompt.py): rule 1 as above, then rule 3 with `0` allowed
    besides `1`/`+1`/`-1` (`+0`, `-0` and U+2212 `0` read as 0); no hint. The last box counts,
    hint-marker blocks included (the process judge writes none, and a quoted one is defused)."""
    raw = text or ""
    answer = strip_thinking(raw)
    if not answer.strip():
        return Vote(score=None, hint=None, raw=raw)
    return Vote(score=last_boxed_score(answer, PROCESS_SCORES), hint=None, raw=raw)
