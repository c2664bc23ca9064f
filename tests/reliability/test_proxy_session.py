"""The proxy's pure parts: request validation, history comparison, session continuation and forks,
and the per-turn cut (environments/proxy/)."""

from __future__ import annotations

import pytest

from environments.proxy.openai_wire import RequestError, comparable, parse_request, template_messages
from environments.proxy.session import SessionState
from environments.proxy.turn_sample import cut_turn
from environments.rollout.agent_loop import assistant_message
from hermes_opd.contract.constants import MASKED
from hermes_opd.record.trajectory import PROMPT_LOGPROB
from hermes_opd.vllm_api.wire_format import GeneratedSequence

TOOLS = [{"type": "function", "function": {"name": "write_file", "parameters": {"type": "object"}}}]


def body(**extra):
    return {"model": "m", "messages": [{"role": "user", "content": "hi"}], **extra}


@pytest.mark.reliability
@pytest.mark.parametrize(
    ("request_body", "message", "param"),
    [
        ([], "the request body must be a JSON object", None),
        ({"messages": [{"role": "user", "content": "x"}]}, "'model' is required", "model"),
        (body(messages=[]), "'messages' must be a non-empty list", "messages"),
        (body(messages=[{"role": "wizard", "content": "x"}]),
         "messages[0].role must be one of ['assistant', 'developer', 'system', 'tool', 'user'], got 'wizard'",
         "messages[0].role"),
        (body(messages=[{"role": "user", "content": 3}]), "messages[0].content must be a string or a list of parts",
         "messages[0].content"),
        (body(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]),
         "messages[0].content: only text parts are supported", "messages[0].content"),
        (body(messages=[{"role": "tool", "content": "r"}]), "messages[0]: a tool message needs a 'tool_call_id' string",
         "messages[0].tool_call_id"),
        (body(messages=[{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]),
         "the last message must not be an assistant message (no prefill)", "messages"),
        (body(n=2), "only n=1 is supported", "n"),
        (body(temperature=3), "'temperature' must be a number in [0.0, 2.0], got 3", "temperature"),
        (body(max_tokens=0), "'max_tokens' must be an integer >= 1, got 0", "max_tokens"),
        (body(tool_choice="required"), "tool_choice must be 'auto' or 'none', got 'required'", "tool_choice"),
        (body(tools=[{"type": "function"}]), "tools[0] must be {'type': 'function', 'function': {...}}", "tools[0]"),
        (body(stream="yes"), "'stream' must be a boolean", "stream"),
        (body(stop=[1]), "'stop' must be a string or a list of strings", "stop"),
    ],
)  # fmt: skip
def test_malformed_requests_are_refused_with_the_openai_fields(request_body, message, param):
    with pytest.raises(RequestError) as caught:
        parse_request(request_body)
    assert (str(caught.value), caught.value.param, caught.value.status) == (message, param, 400)


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


@pytest.mark.reliability
@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--host", "0.0.0.0"], "binding 0.0.0.0 needs API keys"),
        ([], "policy_base_url"),
    ],
)
def test_an_unusable_proxy_configuration_exits_2_with_one_line(capsys, extra, message):
    from hermes_opd.commands.proxy import main

    base = ["--policy-url", "http://127.0.0.1:9/v1"] if extra else []
    argv = [*base, "--policy-model", "m", "--tokenizer", "t", *extra]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("hermes-opd proxy: unusable configuration:") and message in err and "\n" not in err
