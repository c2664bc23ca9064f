"""Counting a request's tokens before its chat template renders it, in small pieces.

A request can bring megabytes of text. Encoded whole, 3.9 MB of prose is ~1M tokens: ~1.1 s of
encoding, hundreds of MB of `Encoding` objects, and their release holds the interpreter for
0.05-0.14 s, which stalls every other request (measured with scripts/proxy_large_requests.py).
Here the texts are cut into pieces of at most `PIECE_CHARS` characters, encoded a few pieces per
call (the Rust tokenizer's batch call runs without holding the interpreter), and counting stops as
soon as the count is over the bound: a request far over it costs about one bound's worth of
encoding, whatever its size.

A cut can split what the whole text would have made one token, so the count of the pieces can be
a little higher than the whole's. Pieces are cut just before a space where one is near the end (a
pre-token boundary for byte-level and metaspace tokenizers alike), and every cut is allowed
`CUT_SLACK_TOKENS` tokens of excess: the result is a lower bound on the whole's count, never a
reason to refuse a request that fits (tests/unit/test_token_count.py checks this on prose, code,
unspaced runs and multi-byte text)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

PIECE_CHARS = 16 * 1024
"""Most characters encoded as one piece (at most 4 tokens a character: 64k tokens)."""
PIECES_PER_CALL = 4
"""Pieces encoded in one batch call; the count is checked against the bound after each call."""
CUT_SLACK_TOKENS = 4
"""Tokens a cut may add over the whole text's count; subtracted once per cut."""

EncodeBatch = Callable[[list[str]], Sequence[Any]]
"""`tokenizers.Tokenizer.encode_batch` without special tokens: one encoding (with `len`) per text."""


def pieces(text: str, size: int = PIECE_CHARS) -> Iterator[str]:
    """`text` in consecutive pieces of at most `size` characters, joined back to `text` exactly.
    A piece ends just before a space in its second half where there is one."""
    start = 0
    while len(text) - start > size:
        end = start + size
        space = text.rfind(" ", start + size // 2, end)
        cut = space if space > start else end
        yield text[start:cut]
        start = cut
    if start < len(text) or not text:
        yield text[start:]


def tokens_at_least(encode_batch: EncodeBatch, texts: Sequence[str], bound: int) -> int:
    """A lower bound on the tokens of `texts`, each encoded alone; once it is over `bound`,
    counting stops and the bound so far is returned (so the result is > bound iff the texts are
    certainly over it)."""
    counted = 0
    cuts = 0
    batch: list[str] = []

    def over() -> bool:
        return counted - CUT_SLACK_TOKENS * cuts > bound

    for text in texts:
        for index, piece in enumerate(pieces(text)):
            cuts += index > 0
            batch.append(piece)
            if len(batch) == PIECES_PER_CALL:
                counted += sum(len(encoding) for encoding in encode_batch(batch))
                batch = []
                if over():
                    return counted - CUT_SLACK_TOKENS * cuts
    if batch:
        counted += sum(len(encoding) for encoding in encode_batch(batch))
    return max(0, counted - CUT_SLACK_TOKENS * cuts)
