"""The proxy's pure parts: a valid request read with OpenAI's defaults, history comparison, session
continuation and forks, and the per-turn cut (environments/proxy/). Malformed requests: in
tests/reliability/test_proxy_session.py."""

from __future__ import annotations

import pytest

from environments.proxy.openai_wire import comparable, parse_request, template_messages
from environments.proxy.session import SessionState
from environments.proxy.turn_sample import cut_turn
from environments.rollout.agent_loop import assistant_message
from hermes_opd.contract.constants import MASKED
from hermes_opd.record.trajectory import PROMPT_LOGPROB
from hermes_opd.vllm_api.wire_format import GeneratedSequence
from tests.support.proxy_session import body

TOOLS = [{"type": "function", "function": {"name": "write_file", "parameters": {"type": "object"}}}]


def test_a_valid_request_is_read_with_openai_defaults():
    chat = parse_request(body(tools=TOOLS, max_completion_tokens=7, stop="END", seed=3))
    assert (chat.temperature, chat.top_p, chat.max_tokens, chat.stop, chat.seed, chat.tool_names) == (
        1.0, 1.0, 7, ["END"], 3, {"write_file"},
    )  # fmt: skip


def test_template_messages_name_tool_results_and_parse_arguments():
    messages = [
        {"role": "developer", "content": "sys"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "write_file", "arguments": '{"path": "a"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    ]  # fmt: skip
    assert template_messages(messages) == [
        {"role": "system", "content": "sys"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "write_file", "arguments": {"path": "a"}}}]},
        {"role": "tool", "content": "ok", "tool_call_id": "c1", "name": "write_file"},
    ]  # fmt: skip


def test_comparable_ignores_sdk_extras_and_argument_formatting():
    ours = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1, "b": 2}'}}]}  # fmt: skip
    echoed = {"role": "assistant", "content": "", "refusal": None, "annotations": [], "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"b":2,"a":1}'}}]}  # fmt: skip
    assert comparable(ours) == comparable(echoed)
    edited = {
        **echoed,
        "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": '{"a": 9, "b": 2}'}}],
    }
    assert comparable(ours) != comparable(edited)


def _generated(tokenizer, text):
    ids = tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    return GeneratedSequence(ids, [-0.5 - i / 100 for i in range(len(ids))], "stop", text)


def _answer(state, tokenizer, messages, text, version=0):
    prepared = state.prepare(messages, None)
    generated = _generated(tokenizer, text)
    reply = {"role": "assistant", "content": text}
    state.record_reply(messages, generated, assistant_message(text, []), text, reply, ("m", version))
    return prepared, generated, reply


def test_a_continued_session_yields_the_turn_with_its_next_state_and_exact_ids(dev_tokenizer):
    state = SessionState("s", dev_tokenizer)
    first = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "write add"}]
    p1, g1, r1 = _answer(state, dev_tokenizer, first, "def add(a, b): return a + b")
    assert (p1.forked, p1.finished) == ("new", None)
    second = [*first, r1, {"role": "user", "content": "name it plus, please"}]
    p2, _, _ = _answer(state, dev_tokenizer, second, "def plus(a, b): return a + b", version=3)
    assert p2.forked is None
    trajectory, (turn, model, version) = p2.finished
    assert (turn, model, version) == (0, "m", 0)
    span = trajectory.turns[0]
    assert trajectory.tokens[span.start : span.end] == g1.token_ids
    assert trajectory.inference_logprobs[span.start : span.end] == g1.logprobs
    assert trajectory.tokens == p1.context + g1.token_ids  # the first turn's context, exactly
    assert trajectory.messages[-1] == {"role": "user", "content": "name it plus, please"}
    # the next request's context extends the first turn's ids exactly: nothing re-tokenized
    assert p2.context[: len(trajectory.tokens)] == trajectory.tokens


def test_the_second_turn_is_cut_with_the_first_masked(dev_tokenizer):
    state = SessionState("s", dev_tokenizer)
    m1 = [{"role": "user", "content": "a"}]
    _, _, r1 = _answer(state, dev_tokenizer, m1, "one")
    m2 = [*m1, r1, {"role": "user", "content": "b"}]
    _, g2, r2 = _answer(state, dev_tokenizer, m2, "two")
    p3 = state.prepare([*m2, r2, {"role": "user", "content": "c"}], None)
    trajectory, (turn, _, _) = p3.finished
    assert turn == 1
    (span,) = trajectory.turns
    assert trajectory.tokens[span.start :] == g2.token_ids
    assert [m for m in trajectory.masks[: span.start] if m != MASKED] == []
    assert set(trajectory.inference_logprobs[: span.start]) == {PROMPT_LOGPROB}


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda m, r: [m[0], {**r, "content": "def add(a, b): return b + a"}, {"role": "user", "content": "ok"}],
         "history_edited"),
        (lambda m, r: [{"role": "user", "content": "write sub"}, r, {"role": "user", "content": "ok"}], "history_edited"),
        (lambda m, r: [m[0]], "resent_without_reply"),
        (lambda m, r: [m[0], r, {"role": "assistant", "content": "mine"}, {"role": "user", "content": "ok"}],
         "foreign_assistant_message"),
    ],
)  # fmt: skip
def test_a_changed_history_forks_and_never_trains_foreign_tokens(dev_tokenizer, change, reason):
    state = SessionState("s", dev_tokenizer)
    first = [{"role": "user", "content": "write add"}]
    _, generated, reply = _answer(state, dev_tokenizer, first, "def add(a, b): return a + b")
    prepared = state.prepare(change(first, reply), None)
    assert (prepared.forked, prepared.finished, prepared.dropped_turn) == (reason, None, True)
    # the new record holds the whole request as masked context: nothing in it is trainable
    assert state.recorder.turns == [] and set(state.recorder.masks) == {MASKED}


def test_cut_turn_keeps_only_that_turns_sampled_rows(dev_tokenizer):
    state = SessionState("s", dev_tokenizer)
    m1 = [{"role": "user", "content": "a"}]
    _answer(state, dev_tokenizer, m1, "one")
    record = state.recorder.trajectories()[-1]
    record.sampled_topk = {record.turns[0].start: ([1, 2], [-0.1, -2.0])}
    cut = cut_turn(record, 0)
    assert cut.sampled_topk == record.sampled_topk and len(cut.tokens) == record.turns[0].end
