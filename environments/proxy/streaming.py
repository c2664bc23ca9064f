"""Incremental detokenization of a streamed answer (pure logic over a tokenizer).

vLLM streams sampled ids a few at a time; a byte-level BPE splits one character over several ids,
so decoding each piece alone would emit broken UTF-8 (U+FFFD). `IncrementalDecoder` keeps the
ids it has seen and emits only text that is final: it decodes a short window before the new ids
(the offsets vLLM's own detokenizer uses) and holds text back while it ends in U+FFFD. The cost per
piece is proportional to the piece, not to the answer so far."""

from __future__ import annotations

from typing import Any

REPLACEMENT = "\ufffd"


class IncrementalDecoder:
    """Ids in, text out; the concatenation of every `feed` and `flush` is the answer's text."""

    def __init__(self, tokenizer: Any, *, skip_special_tokens: bool = True) -> None:
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self.ids: list[int] = []
        self._prefix = 0
        """Start of the window decoded for context (a few ids before the unread ones)."""
        self._read = 0
        """Ids before this index have had their text emitted."""
        self.text = ""
        """Everything emitted so far."""

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=self.skip_special_tokens)

    def feed(self, ids: list[int]) -> str:
        """The new final text that `ids` complete ("" while a character is still incomplete)."""
        self.ids.extend(ids)
        before = self._decode(self.ids[self._prefix : self._read])
        after = self._decode(self.ids[self._prefix :])
        if not after or after.endswith(REPLACEMENT) or len(after) < len(before):
            return ""
        new = after[len(before) :]
        self._prefix, self._read = self._read, len(self.ids)
        self.text += new
        return new

    def flush(self) -> str:
        """Whatever is left at the end of the answer (an incomplete character stays U+FFFD, as a
        whole decode would write it)."""
        before = self._decode(self.ids[self._prefix : self._read])
        after = self._decode(self.ids[self._prefix :])
        new = after[len(before) :] if after.startswith(before) else ""
        self._prefix = self._read = len(self.ids)
        self.text += new
        return new
