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
        tools=DEV_TOOLS,
        add_generation_prompt=True,
        tokenize=True,
        return_dict=False,
    )
    assert first == expected
    gen1 = generate(dev_tokenizer, " " + CALL)  # a leading space: BPE would merge it differently in context
    span1 = recorder.record_generation(
        gen1, [-0.5] * len(gen1), {"role": "assistant", "content": ""}, dev_tokenizer.decode(gen1[:-1])
    )
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
    # the anchors a hint can use: each batch's last user message and its last message
    assert set(ends) == {0, 3}
    for index, text in [(0, "Write add."), (3, "again")]:
        before = dev_tokenizer.decode(recorder.tokens[: ends[index]])
        assert before.endswith(text)
        assert dev_tokenizer.decode(recorder.tokens[ends[index] : ends[index] + 1]) == "<|im_end|>"


class CountingTokenizer:
    """The dev tokenizer, counting its chat-template renders."""

    def __init__(self, inner):
        self.inner = inner
        self.renders = 0

    def apply_chat_template(self, messages, **kwargs):
        self.renders += 1
        return self.inner.apply_chat_template(messages, **kwargs)

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def __call__(self, *args, **kwargs):
        return self.inner(*args, **kwargs)


@pytest.mark.parametrize("turns", [1, 200])
def test_recording_a_long_history_takes_a_few_renders_not_one_per_message(dev_tokenizer, turns):
    """A client may open a session with thousands of messages: one render per message (each of the
    whole conversation) would cost minutes of CPU for one request."""
    history = [
        m
        for i in range(turns)
        for m in ({"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": "a"})
    ]
    messages = [*history, {"role": "tool", "content": "out"}, {"role": "user", "content": "last"}]
    counting = CountingTokenizer(dev_tokenizer)
    recorder = TranscriptRecorder(counting, None)
    recorder.start(messages)
    assert counting.renders <= 8, counting.renders  # the probe's (once per template), the prompt, the anchors
    last = len(messages) - 1
    assert set(recorder.content_ends) == {last}
    assert dev_tokenizer.decode(recorder.tokens[: recorder.content_ends[last]]).endswith("user\nlast")


class ThinkStrippingTokenizer:
    """Wraps the dev tokenizer with a template that drops every earlier assistant turn's reasoning."""

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


def test_template_that_rewrites_history_in_a_tool_loop_is_refused(dev_tokenizer):
    recorder = TranscriptRecorder(ThinkStrippingTokenizer(dev_tokenizer), None)
    recorder.start([{"role": "user", "content": "hi"}])
    assert recorder.history.past_reasoning == "dropped" and not recorder.history.tool_append_only
    gen = generate(dev_tokenizer, "<think>hmm</think>ok")
    recorder.record_generation(
        gen, [-1.0] * len(gen), {"role": "assistant", "content": "ok"}, "<think>hmm</think>ok"
    )
    with pytest.raises(TemplateNotAppendOnlyError, match="not be a prefix of the next"):
        recorder.extend([{"role": "tool", "name": "terminal", "content": "next"}])


def test_task_text_that_also_occurs_in_the_tool_schemas_is_anchored_in_its_own_message(dev_tokenizer):
    # "Run a shell command." is also the terminal tool's description inside the system block.
    task = "Run a shell command."
    recorder = TranscriptRecorder(dev_tokenizer, DEV_TOOLS)
    recorder.start([{"role": "system", "content": "Be brief"}, {"role": "user", "content": task}])
    text = dev_tokenizer.decode(recorder.tokens)
    assert text.index(task) < text.index("</tools>"), "the text does occur in the schemas first"
    anchor = recorder.content_ends[1]
    assert dev_tokenizer.decode(recorder.tokens[:anchor]).endswith("<|im_start|>user\n" + task)
    assert recorder.tokens[anchor] == dev_tokenizer.eos_token_id
    assert anchor > len(dev_tokenizer.encode(text[: text.index("</tools>")], add_special_tokens=False))
    # A tool result whose text also occurs earlier (the schema's own word) anchors in its own message too.
    gen = generate(dev_tokenizer, CALL)
    recorder.record_generation(gen, [-1.0] * len(gen), {"role": "assistant", "content": ""}, CALL)
    recorder.extend([{"role": "tool", "name": "terminal", "content": "command"}])
    end = recorder.content_ends[3]
    assert dev_tokenizer.decode(recorder.tokens[:end]).endswith("<|im_start|>tool\ncommand")
    assert recorder.tokens[end] == dev_tokenizer.eos_token_id


def test_content_the_template_transforms_gets_no_anchor_and_its_turn_says_so(dev_tokenizer, dev_model_dir):
    import asyncio

    from transformers import AutoTokenizer

    from environments.pipeline.opd_config import OPDConfig
    from environments.pipeline.opd_pipeline import OPDPipeline
    from hermes_opd.record.turn_pairs import extract_turn_pairs

    shouting = AutoTokenizer.from_pretrained(dev_model_dir)
    shouting.chat_template = dev_tokenizer.chat_template.replace(
        "(message.content if message.content is string else '')",
        "((message.content | upper) if message.role == 'user' else message.content)",
    )
    recorder = TranscriptRecorder(shouting, None)
    recorder.start([{"role": "user", "content": "write add."}])
    assert "WRITE ADD." in shouting.decode(recorder.tokens)
    assert 0 not in recorder.content_ends, "a transformed content has no exact end to anchor on"
    gen = generate(dev_tokenizer, "ok")
    recorder.record_generation(gen, [-1.0] * len(gen), {"role": "assistant", "content": "ok"}, "ok")
    recorder.extend([{"role": "tool", "name": "terminal", "content": "exit code 1"}])
    traj = recorder.trajectory()

    class NoJudge:
        async def collect_votes(self, pair):
            raise AssertionError("a turn without an anchor must not cost a judge call")

    pipeline = OPDPipeline(shouting, NoJudge(), teacher=None, config=OPDConfig())
    pair = extract_turn_pairs(traj)[0]
    result = asyncio.run(pipeline._process_turn(traj, pair))
    assert result.status == "no_anchor" and "transformed" in result.error
    assert result.provenance()["status"] == "no_anchor"


def test_misuse_is_reported(dev_tokenizer):
    recorder = TranscriptRecorder(dev_tokenizer, None)
    with pytest.raises(RuntimeError, match="needs a context"):
        recorder.record_generation([1], [-1.0], {"role": "assistant", "content": ""}, "")
    recorder.start([{"role": "user", "content": "hi"}])
    with pytest.raises(RuntimeError, match="follows record_generation"):
        recorder.extend([{"role": "user", "content": "x"}])
    with pytest.raises(ValueError, match="2 generated ids but 1 logprobs"):
        recorder.record_generation([1, 2], [-1.0], {"role": "assistant", "content": ""}, "")


# A Qwen3-style template (written for this test): assistant reasoning (`<think>...</think>` in the
# content) is kept for turns after the last user message and dropped for turns before it; tool
# results are wrapped in a user-role turn, as Qwen3 does.
QWEN3_STYLE = r"""
{%- set ns = namespace(last_user=-1) %}
{%- for m in messages %}{%- if m.role == 'user' %}{%- set ns.last_user = loop.index0 %}{%- endif %}{%- endfor %}
{%- for m in messages %}
{%- if m.role == 'assistant' %}
{%- set content = m.content %}
{%- if loop.index0 < ns.last_user and '</think>' in content %}
{%- set content = content.split('</think>')[-1].lstrip('\n') %}
{%- endif %}
{{- '<|im_start|>assistant\n' + content + '<|im_end|>\n' }}
{%- elif m.role == 'tool' %}
{{- '<|im_start|>user\n<tool_response>\n' + m.content + '\n</tool_response><|im_end|>\n' }}
{%- else %}
{{- '<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>\n' }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}
"""


def test_qwen3_style_template_records_tool_loops_exactly_and_starts_a_new_sequence_after_a_user_message(
    dev_tokenizer, dev_model_dir
):
    from transformers import AutoTokenizer

    from hermes_opd.record.hint_splice import build_canonical_teacher_input
    from hermes_opd.record.turn_pairs import extract_turn_pairs

    qwen3 = AutoTokenizer.from_pretrained(dev_model_dir)
    qwen3.chat_template = QWEN3_STYLE
    recorder = TranscriptRecorder(qwen3, None)
    context = recorder.start(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Write add."}]
    )
    assert recorder.history.as_dict() == {
        "tool_append_only": True,
        "user_append_only": False,
        "past_reasoning": "dropped_before_last_user",
    }
    raw = [
        "<think>\nI write it first.\n</think>\n\n" + CALL,
        "<think>\nNow check.\n</think>\n\n" + CALL,
        "<think>\nIt works.\n</think>\n\nDone.",
    ]
    spans, contexts = [], [context]
    for i, text in enumerate(raw):
        gen = generate(qwen3, text)
        spans.append(
            recorder.record_generation(gen, [-0.1 * (i + 1)] * len(gen), {"role": "assistant"}, text)
        )
        if i < 2:
            contexts.append(
                recorder.extend([{"role": "tool", "name": "terminal", "content": f"exit code {i}"}])
            )
    # The tool loop is one exact stream: each context a prefix of the next, generated ids untouched,
    # and the reasoning of every past turn still in it (the template keeps it after the last user query).
    for before, after in zip(contexts, contexts[1:], strict=False):
        assert after[: len(before)] == before
    for span, text in zip(spans, raw, strict=True):
        assert recorder.tokens[span.start : span.end] == generate(qwen3, text)
    expected = qwen3.apply_chat_template(
        recorder._render_messages, tokenize=True, add_generation_prompt=False, return_dict=False
    )
    # Append-only for tool messages: the stream is the template's own rendering (up to the "\n" that
    # follows the last turn's EOS, which the next extend() adds).
    assert recorder.tokens == expected[:-1] and qwen3.decode(expected[-1:]) == "\n"
    # A user message after the reasoning turns re-renders them without reasoning: the documented path
    # is a new training sequence from the re-rendered context, not a failed rollout.
    new_context = recorder.extend([{"role": "user", "content": "Tests fail.", "name": "verifier"}])
    assert new_context == qwen3.apply_chat_template(
        recorder._render_messages, tokenize=True, add_generation_prompt=True, return_dict=False
    )
    assert "I write it first." not in qwen3.decode(new_context)
    assert set(recorder.masks) == {MASKED} and recorder.turns == []
    with pytest.raises(ValueError, match="split into 2 sequences"):
        recorder.trajectory()
    gen = generate(qwen3, "<think>\nFix.\n</think>\n\nFixed.")
    span = recorder.record_generation(gen, [-0.2] * len(gen), {"role": "assistant"}, qwen3.decode(gen[:-1]))
    first, second = recorder.trajectories(score=0.5)
    assert (first.sequence_index, second.sequence_index, first.score, second.score) == (0, 1, 0.5, 0.5)
    # The first sequence keeps its three exact turns; the user message is its last turn's next state.
    assert first.turns == spans and first.tokens == expected[:-1]
    pairs = extract_turn_pairs(first)
    assert [p.next_state_role for p in pairs] == ["tool", "tool", "user"]
    assert pairs[-1].next_state_text == "Tests fail."
    # Every turn of the first sequence still gets a hint anchor and a canonical teacher input.
    for p in pairs:
        splice = build_canonical_teacher_input(first, p.span, "Check it.", qwen3)
        assert splice.ids[splice.prompt_len :] == first.tokens[p.span.start : p.span.end]
        assert (
            qwen3.decode(splice.ids[: splice.prompt_len]).count("Write add.\n\n[user's hint / instruction]")
            == 1
        )
    # The second sequence holds the re-rendered history (masked) and the new turn, anchored at the new user message.
    assert second.turns == [span] and second.tokens[span.start :] == gen
    assert second.template_history == first.template_history
    anchor = second.hint_anchor(span)
    assert qwen3.decode(second.tokens[:anchor]).endswith("<|im_start|>user\nTests fail.")


@pytest.mark.parametrize("template", ["dev", "qwen3_style"])
def test_a_prompt_that_is_never_recorded_is_the_recorders_first_context(
    dev_tokenizer, dev_model_dir, template
):
    from transformers import AutoTokenizer

    from hermes_opd.record.transcript_recorder import first_context

    tokenizer = AutoTokenizer.from_pretrained(dev_model_dir)
    if template == "qwen3_style":
        tokenizer.chat_template = QWEN3_STYLE
    messages = [
        {"role": "system", "content": "Be brief. é ✓"},
        {"role": "user", "content": "Write add.\n  Then run it."},
    ]
    for tools in (None, DEV_TOOLS):
        recorder = TranscriptRecorder(tokenizer, tools)
        assert first_context(tokenizer, messages, tools) == recorder.start(messages)


def test_the_template_probe_runs_once_per_template_and_tool_list(dev_model_dir, monkeypatch):
    from transformers import AutoTokenizer

    import hermes_opd.record.transcript_recorder as transcript_recorder
    from hermes_opd.record.template_history import probe_template_history

    probes = []

    def counted(render):
        probes.append(render)
        return probe_template_history(render)

    monkeypatch.setattr(transcript_recorder, "probe_template_history", counted)
    tokenizer = AutoTokenizer.from_pretrained(dev_model_dir)
    messages = [{"role": "user", "content": "Write add."}]

    def history(tools=None):
        recorder = TranscriptRecorder(tokenizer, tools)
        recorder.start(messages)
        return recorder.history.as_dict()

    kept = history()
    assert history() == kept and len(probes) == 1
    assert history(DEV_TOOLS) == kept and len(probes) == 2  # other tools: probed again
    assert history(DEV_TOOLS) == kept and len(probes) == 2
    tokenizer.chat_template = QWEN3_STYLE  # another template on the same tokenizer: probed again
    assert history()["past_reasoning"] == "dropped_before_last_user" and len(probes) == 3
