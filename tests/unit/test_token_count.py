"""Counting a request's tokens in pieces (`environments/proxy/token_count.py`): never above the whole
text's count (so nothing that fits is refused), over the bound whenever the text is clearly over
it, and stopping early on a text far over it. On the dev model's byte-level tokenizer (Qwen's
pre-tokenizer) and on a metaspace (SentencePiece-style) BPE trained here."""

from __future__ import annotations

import random
from functools import partial

import pytest
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from environments.proxy.token_count import CUT_SLACK_TOKENS, PIECE_CHARS, pieces, tokens_at_least

CODE = '''def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b  # the sum


class Box:
    def __init__(self, items):
        self.items = [x for x in items if x is not None]
'''
PROSE = "The quick brown fox jumps over the lazy dog, and then it runs home again. "


def texts() -> dict[str, str]:
    rng = random.Random(7)
    letters = "abcdefghijklmnopqrstuvwxyz     \n\t.,;:()[]{}=+-_'\"0123456789"
    return {
        "prose": PROSE * 2000,
        "code": CODE * 600,
        "unspaced": "a" * 90_000,
        "unspaced_mixed": "".join(rng.choice("ab=-") for _ in range(90_000)),
        "spaces": " " * 70_000 + "x",
        "cjk_emoji": "日本語のテキストと絵文字😀 " * 6000,
        "random": "".join(rng.choice(letters) for _ in range(120_000)),
    }


@pytest.fixture(scope="module")
def metaspace_tokenizer():
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.normalizer = normalizers.NFKC()
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=["<unk>"], show_progress=False)
    tokenizer.train_from_iterator([PROSE * 20, CODE * 20, "日本語のテキストと絵文字😀"], trainer=trainer)
    return tokenizer


def backends(dev_tokenizer, metaspace_tokenizer):
    return {"byte_level": dev_tokenizer._tokenizer, "metaspace": metaspace_tokenizer}


def test_pieces_join_back_to_the_text_and_are_bounded():
    for name, text in texts().items():
        parts = list(pieces(text))
        assert "".join(parts) == text, name
        assert all(0 < len(p) <= PIECE_CHARS for p in parts), name
    assert list(pieces("")) == [""]
    assert list(pieces("short")) == ["short"]


@pytest.mark.parametrize("name", sorted(texts()))
def test_the_count_is_a_lower_bound_close_to_the_whole(name, dev_tokenizer, metaspace_tokenizer):
    text = texts()[name]
    for kind, backend in backends(dev_tokenizer, metaspace_tokenizer).items():
        whole = len(backend.encode(text, add_special_tokens=False))
        counted = tokens_at_least(partial(backend.encode_batch, add_special_tokens=False), [text], 10**9)
        cuts = len(list(pieces(text))) - 1
        assert counted <= whole, (kind, counted, whole)
        assert counted >= whole - 2 * CUT_SLACK_TOKENS * cuts, (kind, counted, whole)


def test_a_text_over_the_bound_is_counted_over_it_and_counting_stops_early(dev_tokenizer):
    backend = dev_tokenizer._tokenizer
    text = PROSE * 50_000  # 3.7 MB, ~800k tokens
    encoded_chars = 0

    def encode_batch(batch):
        nonlocal encoded_chars
        encoded_chars += sum(len(t) for t in batch)
        return backend.encode_batch(batch, add_special_tokens=False)

    bound = 20_000
    counted = tokens_at_least(encode_batch, ["hello", text], bound)
    assert counted > bound
    # one bound's worth of text (~4.5 characters a token here) and at most one call's pieces more
    assert encoded_chars < bound * 5 + 4 * PIECE_CHARS
    assert tokens_at_least(encode_batch, ["hello", PROSE * 100], bound) < bound
