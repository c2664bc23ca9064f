"""The exact token record: prefix property, spans, masks and hint anchors, on the dev tokenizer."""

from __future__ import annotations

import pytest

from hermes_opd.contract.constants import MASKED
from hermes_opd.devkit.dev_corpus import DEV_TOOLS
from hermes_opd.record.transcript_recorder import TemplateNotAppendOnlyError, TranscriptRecorder

CALL = '<tool_call>\n{"name": "terminal", "arguments": {"command": "ls"}}\n</tool_call>'


def generate(tokenizer, text: str, eos: bool = True) -> list[int]:
    ids = tokenizer.encode(text, add_special_tokens=False)
    return ids + ([tokenizer.eos_token_id] if eos else [])


def test_each_context_is_a_prefix_of_the_next_and_spans_are_exact(dev_tokenizer):
    recorder = TranscriptRecorder(dev_tokenizer, DEV_TOOLS)
    first = recorder.start(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Write add."}]
    )
    # The first context is exactly the template's rendering with a generation prompt.
    expected = dev_tokenizer.apply_chat_template(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Write add."}],
        tools=DEV_TOOLS, add_generation_prompt=True, tokenize=True, return_dict=False,
    )  # fmt: skip
    assert first == expected
    gen1 = generate(dev_tokenizer, " " + CALL)  # a leading space: BPE would merge it differently in context
    span1 = recorder.record_generation(gen1, [-0.5] * len(gen1), {"role": "assistant", "content": ""},
                                       dev_tokenizer.decode(gen1[:-1]))  # fmt: skip
    second = recorder.extend([{"role": "tool", "name": "terminal", "content": "solution.py"}])
    assert second[: len(first)] == first
    assert second[span1.start : span1.end] == gen1, "generated ids are kept exactly, never re-tokenized"
    gen2 = generate(dev_tokenizer, "Done.", eos=False)  # stopped by length: no EOS
    span2 = recorder.record_generation(
        gen2, [-0.25] * len(gen2), {"role": "assistant", "content": "Done."}, "Done."
    )
    third = recorder.extend([{"role": "user", "content": "Tests fail."}])
    assert third[: span2.end] == second + gen2
    # An unfinished turn is closed by the glue: the EOS appears once, as template text.
    assert dev_tokenizer.decode(third[span2.end : span2.end + 1]) == "<|im_end|>"
    # And a finished one is not closed twice.
    assert dev_tokenizer.decode(second[span1.end : span1.end + 1]) != "<|im_end|>"
    traj = recorder.trajectory()
    unmasked = [i for i, m in enumerate(traj.masks) if m != MASKED]
    assert unmasked == list(range(span1.start, span1.end)) + list(range(span2.start, span2.end))
    assert [traj.inference_logprobs[i] for i in unmasked] == [-0.5] * len(gen1) + [-0.25] * len(gen2)
    assert all(traj.inference_logprobs[i] == 1.0 for i in range(len(traj.tokens)) if traj.masks[i] == MASKED)


def test_content_ends_point_just_after_message_content(dev_tokenizer):
    recorder = TranscriptRecorder(dev_tokenizer, None)
    recorder.start([{"role": "user", "content": "Write add."}])
    gen = generate(dev_tokenizer, "ok")
    recorder.record_generation(gen, [-1.0] * len(gen), {"role": "assistant", "content": "ok"}, "ok")
    recorder.extend([{"role": "tool", "content": "exit code 1"}, {"role": "user", "content": "again"}])
    ends = recorder.content_ends
    assert set(ends) == {0, 2, 3}
    for index, text in [(0, "Write add."), (2, "exit code 1"), (3, "again")]:
        before = dev_tokenizer.decode(recorder.tokens[: ends[index]])
        assert before.endswith(text)
        assert dev_tokenizer.decode(recorder.tokens[ends[index] : ends[index] + 1]) == "<|im_end|>"


def test_template_that_rewrites_history_is_refused(dev_tokenizer):
    class ThinkStrippingTokenizer:
        """Wraps the dev tokenizer with a template that drops earlier assistant turns' text."""

        def __init__(self, inner):
            self.inner = inner
            self.eos_token_id = inner.eos_token_id

        def apply_chat_template(self, messages, **kwargs):
            cleaned = [dict(m) for m in messages]
            if len(cleaned) > 2:
                for m in cleaned[:-1]:
                    if m["role"] == "assistant":
                        m["content"] = m["content"].split("</think>")[-1]
            return self.inner.apply_chat_template(cleaned, **kwargs)

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def __call__(self, *args, **kwargs):
            return self.inner(*args, **kwargs)

    recorder = TranscriptRecorder(ThinkStrippingTokenizer(dev_tokenizer), None)
    recorder.start([{"role": "user", "content": "hi"}])
    gen = generate(dev_tokenizer, "<think>hmm</think>ok")
    recorder.record_generation(
        gen, [-1.0] * len(gen), {"role": "assistant", "content": "ok"}, "<think>hmm</think>ok"
    )
    with pytest.raises(TemplateNotAppendOnlyError, match="not be a prefix of the next"):
        recorder.extend([{"role": "user", "content": "next"}])


def test_misuse_is_reported(dev_tokenizer):
    recorder = TranscriptRecorder(dev_tokenizer, None)
    with pytest.raises(RuntimeError, match="needs a context"):
        recorder.record_generation([1], [-1.0], {"role": "assistant", "content": ""}, "")
    recorder.start([{"role": "user", "content": "hi"}])
    with pytest.raises(RuntimeError, match="follows record_generation"):
        recorder.extend([{"role": "user", "content": "x"}])
    with pytest.raises(ValueError, match="2 generated ids but 1 logprobs"):
        recorder.record_generation([1, 2], [-1.0], {"role": "assistant", "content": ""}, "")
