"""The teacher's input for one turn: the student's exact ids, with a canonical boundary around the
hint (pure logic over a tokenizer's encode/decode).

Byte-level BPEs with the GPT-4/Qwen/Llama-3 pre-tokenizer merge punctuation with the newlines after
it, so splicing the separately encoded hint (`HINT_SEPARATOR` starts with `\\n\\n`) after a message
that ends in `.` gives `['.', '\\n\\n', ...]`, a sequence the tokenizer never writes. Instead:

- the anchor's *segment* is the text between the nearest template boundaries (added/special tokens
  such as `<|im_start|>` and `<|im_end|>`) around the anchor, never past the turn's start;
- the segment's text with the hint inserted at the anchor is encoded by the tokenizer itself;
- the replaced range is only where that encoding differs from the student's ids: the longest
  common prefix and suffix are kept as the student's exact ids.

So the teacher input is the student's ids up to a short window before the anchor, the tokenizer's
own encoding of (window text + hint text + text up to the next boundary), then the student's ids
again up to the turn's end. The turn's own ids are never touched.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from hermes_opd.contract.errors import HermesOPDError
from hermes_opd.record.hint import hint_text
from hermes_opd.record.trajectory import Trajectory, TurnSpan


class NoHintAnchorError(HermesOPDError, ValueError):
    """The turn's hint target message has no recorded content end (the template transformed it)."""


@dataclass(frozen=True)
class HintSplice:
    """The teacher input for one turn, and the provenance that rebuilds it from `tokens` alone:
    `ids == tokens[:replaced[0]] + replacement_ids + tokens[replaced[1]:turn_end]`."""

    ids: list[int]
    prompt_len: int
    """Teacher position of the turn's first token: row `prompt_len + j` scores student token `start + j`."""
    hint_insert_at: int
    """The anchor: student position just after the hint target message's content."""
    replaced: tuple[int, int]
    """Half-open range of student positions replaced, `replaced[0] <= hint_insert_at <= replaced[1]`."""
    replacement_ids: list[int]
    segment: tuple[int, int]
    """Student positions of the boundary-delimited segment that was re-encoded (for audits)."""


def boundary_token_ids(tokenizer: Any) -> frozenset[int]:
    """Ids the tokenizer splits text on before BPE (special and other added tokens): a canonical
    encoding never merges across them, so they delimit the re-encoded segment."""
    ids = set(getattr(tokenizer, "all_special_ids", []) or [])
    get_added = getattr(tokenizer, "get_added_vocab", None)
    if callable(get_added):
        ids.update(get_added().values())
    return frozenset(int(i) for i in ids)


def _segment(tokens: list[int], anchor: int, limit: int, boundaries: Iterable[int]) -> tuple[int, int]:
    """[s, e): s just after the last boundary token before `anchor`, e the first boundary at or
    after `anchor` (at most `limit`)."""
    stops = boundaries if isinstance(boundaries, frozenset | set) else frozenset(boundaries)
    start = anchor
    while start > 0 and tokens[start - 1] not in stops:
        start -= 1
    end = anchor
    while end < limit and tokens[end] not in stops:
        end += 1
    return start, end


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def splice_text_at(
    tokens: list[int],
    anchor: int,
    turn: TurnSpan,
    text: str,
    *,
    encode,
    decode,
    boundaries: Iterable[int],
) -> HintSplice:
    """Insert `text` at student position `anchor` (before `turn`), canonically encoded around it.

    `encode(str) -> list[int]` must add no special tokens; `decode(list[int]) -> str` must keep
    special tokens and spaces exactly (no clean-up)."""
    if not 0 <= anchor <= turn.start <= turn.end <= len(tokens):
        raise ValueError(f"hint anchor {anchor} is not within [0, turn start {turn.start}]")
    seg_start, seg_end = _segment(tokens, anchor, turn.start, boundaries)
    before, after = tokens[seg_start:anchor], tokens[anchor:seg_end]
    canonical = list(encode(decode(before) + text + decode(after)))
    keep_head = _common_prefix(before, canonical)
    tail_room = min(len(after), len(canonical) - keep_head)
    keep_tail = _common_prefix(after[::-1], canonical[::-1])
    keep_tail = min(keep_tail, tail_room)
    r0, r1 = seg_start + keep_head, seg_end - keep_tail
    replacement = canonical[keep_head : len(canonical) - keep_tail]
    ids = tokens[:r0] + replacement + tokens[r1 : turn.end]
    return HintSplice(
        ids=ids,
        prompt_len=len(ids) - len(turn),
        hint_insert_at=anchor,
        replaced=(r0, r1),
        replacement_ids=replacement,
        segment=(seg_start, seg_end),
    )


def tokenizer_codec(tokenizer: Any) -> dict[str, Any]:
    """encode/decode/boundaries keyword arguments for `splice_text_at` from a transformers tokenizer."""
    return {
        "encode": lambda text: tokenizer.encode(text, add_special_tokens=False),
        "decode": lambda ids: tokenizer.decode(
            ids, skip_special_tokens=False, clean_up_tokenization_spaces=False
        ),
        "boundaries": boundary_token_ids(tokenizer),
    }


def build_canonical_teacher_input(
    trajectory: Trajectory, span: TurnSpan, hint: str, tokenizer: Any, codec: dict[str, Any] | None = None
) -> HintSplice:
    """The teacher input for `span` with `hint` after its anchor message's content (see module doc).

    Raises NoHintAnchorError when that message has no anchor (its content was transformed by the
    template, so the content end is unknown), ValueError when the anchor lies after the turn."""
    anchor = trajectory.hint_anchor(span)
    if anchor is None:
        raise NoHintAnchorError(
            f"turn at [{span.start}, {span.end}) has no hint anchor: the chat template does not render "
            "the hint target message's content verbatim inside that message"
        )
    return splice_text_at(
        trajectory.tokens, anchor, span, hint_text(hint), **(codec or tokenizer_codec(tokenizer))
    )
