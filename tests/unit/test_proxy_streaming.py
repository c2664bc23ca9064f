"""environments/proxy/streaming.py and streaming_split.py: ids in pieces -> text that never holds a
broken character, and text in pieces -> thinking / content events that stop where a tool call
opens; whatever streamed is a prefix of what the whole answer says (answer_parse.py)."""

from __future__ import annotations

import random

import pytest

from environments.proxy.answer_parse import answer_parts
from environments.proxy.conversation import ContentDelta, ReasoningDelta
from environments.proxy.streaming import REPLACEMENT, IncrementalDecoder
from environments.proxy.streaming_split import StreamSplitter
from tests.support.proxy_factory import TOOLS

TEXTS = [
    "Plain answer with ünïcödé, 漢字 and an emoji 🎉 at the end.\n",
    'I will write it.\n<tool_call>\n{"name": "write_file", "arguments": {"path": "main.py", "content": "x"}}\n</tool_call>',
    '<tool_call>\n{"name": "run_python", "arguments": {"path": "main.py"}}\n</tool_call>\n'
    '<tool_call>\n{"name": "run_python", "arguments": {"path": "b.py"}}\n</tool_call>',
    "<think>\nplan: 🎉 first\n</think>\n\nThe answer <tool_ca is not a tag.",
    'Text <tool_call>\n{"name": "write_file", "content": {"path": "a"}}\n</tool_call> trailing',
    'Text\n<tool_call>\n{"name": "nope", "arguments": {}}\n</tool_call>',
    "<thi",
    "<think>cut off in the middle of thinking",
]


def pieces(seq, rng: random.Random):
    out, i = [], 0
    while i < len(seq):
        n = rng.randint(1, 4)
        out.append(seq[i : i + n])
        i += n
    return out


def test_the_decoder_never_emits_a_broken_character_and_adds_up_to_the_whole_decode(dev_tokenizer):
    rng = random.Random(0)
    for text in TEXTS:
        ids = dev_tokenizer.encode(text, add_special_tokens=False)
        for _ in range(5):
            decoder = IncrementalDecoder(dev_tokenizer)
            shown = [decoder.feed(p) for p in pieces(ids, rng)] + [decoder.flush()]
            assert all(REPLACEMENT not in s for s in shown)
            assert "".join(shown) == decoder.text == dev_tokenizer.decode(ids, skip_special_tokens=True)


def test_an_emoji_split_over_byte_tokens_waits_for_its_last_byte(dev_tokenizer):
    ids = dev_tokenizer.encode("🎉", add_special_tokens=False)
    assert len(ids) > 1, "the dev tokenizer spells an emoji in byte tokens"
    decoder = IncrementalDecoder(dev_tokenizer)
    assert [decoder.feed([i]) for i in ids[:-1]] == [""] * (len(ids) - 1)
    assert decoder.feed(ids[-1:]) == "🎉"


@pytest.mark.parametrize("text", TEXTS)
def test_what_streams_is_a_prefix_of_the_whole_answer_however_it_is_cut(text):
    for seed in range(20):
        splitter = StreamSplitter(tool_calls=True)
        events = [e for p in pieces(text, random.Random(seed)) for e in splitter.feed(p)]
        parts = answer_parts(text, TOOLS, tool_calls=True)
        content = "".join(e.text for e in events if isinstance(e, ContentDelta))
        reasoning = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
        assert parts.content.startswith(content) and content == splitter.content
        assert (parts.reasoning or "").startswith(reasoning)
        assert "<tool_call>" not in content and "<think>" not in content + reasoning


def test_content_stops_where_a_call_opens_and_the_calls_come_whole_at_the_end():
    splitter = StreamSplitter(tool_calls=True)
    events = [e for p in ["I will ", "write it.\n<tool", "_call>\n{", '"name"'] for e in splitter.feed(p)]
    assert events == [ContentDelta("I will"), ContentDelta(" write it.")]
    parts = answer_parts(TEXTS[1], TOOLS, tool_calls=True)
    assert parts.content == "I will write it."
    assert [(c.name, c.arguments) for c in parts.calls] == [
        ("write_file", {"path": "main.py", "content": "x"})
    ]


def test_thinking_streams_apart_from_the_content():
    splitter = StreamSplitter(tool_calls=False)
    events = [e for p in ["<thi", "nk>\nstep", " one</thi", "nk>\n\nDone."] for e in splitter.feed(p)]
    assert "".join(e.text for e in events if isinstance(e, ReasoningDelta)) == "\nstep one"
    assert [e for e in events if isinstance(e, ContentDelta)] == [ContentDelta("Done.")]
    parts = answer_parts("<think>\nstep one</think>\n\nDone.", None, tool_calls=False)
    assert (parts.reasoning, parts.content) == ("\nstep one", "Done.")


def test_a_block_that_does_not_fit_its_schema_stays_content_as_written():
    """`{"name": "write_file", "content": {...}}` has no arguments: it was write_file({}) before."""
    for text in (TEXTS[4], 'x\n<tool_call>\n{"name": "write_file", "arguments": {"path": 3}}\n</tool_call>'):
        parts = answer_parts(text, TOOLS, tool_calls=True)
        assert parts.calls == [] and parts.content == text
    missing = '<tool_call>\n{"name": "write_file", "arguments": {"path": "a.py"}}\n</tool_call>'
    assert answer_parts(missing, TOOLS, tool_calls=True).calls == []  # "content" is required


def test_a_model_that_never_thinks_has_nothing_held_back_for_a_think_tag():
    """Holding `<` until it cannot be `<think>` costs a token of latency; without thinking, none."""
    assert StreamSplitter(tool_calls=False, thinking=False).feed("<") == [ContentDelta("<")]
    assert StreamSplitter(tool_calls=False).feed("<") == []
    parts = answer_parts("<think>x</think>y", None, tool_calls=False, thinking=False)
    assert (parts.reasoning, parts.content) == (None, "<think>x</think>y")
