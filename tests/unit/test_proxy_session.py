"""The proxy's pure parts: a valid request read with OpenAI's defaults, history comparison, session
continuation, branches and forks, plan/commit, and the per-turn cut (environments/proxy/). The
session table: tests/unit/test_proxy_sessions.py; re-rendering clients:
tests/unit/test_proxy_rerender.py. Malformed requests: tests/reliability/test_proxy_session.py."""

from __future__ import annotations

import copy

import pytest

from environments.proxy.chat_completions.request import parse_request
from environments.proxy.history import comparable, template_form
from environments.proxy.session import SessionState
from environments.proxy.turn_sample import cut_turn
from hermes_opd.contract.constants import MASKED
from hermes_opd.record.trajectory import PROMPT_LOGPROB
from tests.support.proxy_session import answer, body, generated

TOOLS = [{"type": "function", "function": {"name": "write_file", "parameters": {"type": "object"}}}]


def test_a_valid_request_is_read_with_openai_defaults():
    chat, include_usage = parse_request(body(tools=TOOLS, max_completion_tokens=7, stop="END", seed=3))
    assert (chat.temperature, chat.top_p, chat.max_tokens, chat.stop, chat.seed, chat.tool_names) == (
        1.0,
        1.0,
        7,
        ["END"],
        3,
        {"write_file"},
    )
    assert (chat.tool_choice, chat.output_format, chat.stream, include_usage) == ("auto", None, False, False)


def test_template_form_names_tool_results_and_parses_arguments():
    messages = [
        {"role": "developer", "content": "sys"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "write_file", "arguments": '{"path": "a"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    ]
    expected = [
        {"role": "system", "content": "sys"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "write_file", "arguments": {"path": "a"}},
                }
            ],
        },
        {"role": "tool", "content": "ok", "tool_call_id": "c1", "name": "write_file"},
    ]
    assert template_form(messages) == expected
    # the live path: the wire's Conversation form (arguments as JSON text), then the template form
    chat, _ = parse_request(body(messages=messages))
    assert template_form(chat.messages) == expected


def test_comparable_ignores_sdk_extras_and_argument_formatting():
    ours = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1, "b": 2}'}}
        ],
    }
    echoed = {
        "role": "assistant",
        "content": "",
        "refusal": None,
        "annotations": [],
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"b":2,"a":1}'}}
        ],
    }
    assert comparable(ours) == comparable(echoed)
    edited = {
        **echoed,
        "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": '{"a": 9, "b": 2}'}}],
    }
    assert comparable(ours) != comparable(edited)


def test_a_continued_session_yields_the_turn_with_its_next_state_and_exact_ids(dev_tokenizer):
    state = SessionState("s", dev_tokenizer)
    first = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "write add"}]
    p1, g1, r1, d1 = answer(state, dev_tokenizer, first, "def add(a, b): return a + b")
    assert (p1.forked, d1.finished, d1.recorded_turn) == ("new", None, 0)
    second = [*first, r1, {"role": "user", "content": "name it plus, please"}]
    p2, _, _, d2 = answer(state, dev_tokenizer, second, "def plus(a, b): return a + b", version=3)
    assert p2.forked is None
    trajectory, (turn, model, version) = d2.finished
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
    _, _, r1, _ = answer(state, dev_tokenizer, m1, "one")
    m2 = [*m1, r1, {"role": "user", "content": "b"}]
    _, g2, r2, _ = answer(state, dev_tokenizer, m2, "two")
    _, _, _, d3 = answer(state, dev_tokenizer, [*m2, r2, {"role": "user", "content": "c"}], "three")
    trajectory, (turn, _, _) = d3.finished
    assert turn == 1
    (span,) = trajectory.turns
    assert trajectory.tokens[span.start :] == g2.token_ids
    assert [m for m in trajectory.masks[: span.start] if m != MASKED] == []
    assert set(trajectory.inference_logprobs[: span.start]) == {PROMPT_LOGPROB}


def _snapshot(state):
    records = [
        (b.expected, b.waiting, copy.deepcopy(vars(b.recorder) | {"tokenizer": None})) for b in state.branches
    ]
    return state.version, state.turn_count, records, list(state.continued)


def test_plan_changes_nothing_and_a_failed_call_leaves_the_session_as_it_was(dev_tokenizer):
    """The wedge: a request planned (its user message rendered) whose policy call then fails must
    not half-update the record; the retry is planned against the same state and continues it."""
    state = SessionState("s", dev_tokenizer, named=True)
    m1 = [{"role": "user", "content": "a"}]
    _, g1, r1, _ = answer(state, dev_tokenizer, m1, "one")
    m2 = [*m1, r1, {"role": "user", "content": "b"}]
    before = _snapshot(state)
    failed = state.plan(m2, None)  # the policy answers 400: nothing is committed
    assert _snapshot(state) == before
    retried, g2, r2, done = answer(state, dev_tokenizer, m2, "two")
    assert retried.context == failed.context and retried.forked is None
    trajectory, (turn, _, _) = done.finished
    assert turn == 0 and trajectory.tokens[trajectory.turns[0].start :] == g1.token_ids
    _, _, _, d3 = answer(state, dev_tokenizer, [*m2, r2, {"role": "user", "content": "c"}], "three")
    assert d3.finished[1][0] == 1 and d3.finished[0].tokens[d3.finished[0].turns[0].start :] == g2.token_ids


def test_a_plan_made_before_another_commit_is_refused(dev_tokenizer):
    state = SessionState("s", dev_tokenizer)
    m1 = [{"role": "user", "content": "a"}]
    stale = state.plan(m1, None)
    answer(state, dev_tokenizer, m1, "one")
    with pytest.raises(RuntimeError, match="stale plan"):
        state.commit(
            stale,
            generated(dev_tokenizer, "x"),
            {"role": "assistant", "content": "x"},
            "x",
            {"role": "assistant", "content": "x"},
            ("m", 0),
        )


def test_a_turn_served_but_not_recorded_still_finishes_the_waiting_one(dev_tokenizer):
    state = SessionState("s", dev_tokenizer, named=True)
    m1 = [{"role": "user", "content": "a"}]
    _, _, r1, _ = answer(state, dev_tokenizer, m1, "one")
    m2 = [*m1, r1, {"role": "user", "content": "b"}]
    _, _, r2, done = answer(state, dev_tokenizer, m2, "two", record=False)
    assert done.finished is not None and done.recorded_turn is None
    assert state.branches == [] and state.turn_count == 1
    p3, _, _, d3 = answer(state, dev_tokenizer, [*m2, r2, {"role": "user", "content": "c"}], "three")
    assert (p3.forked, d3.finished) == ("new", None)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (
            lambda m, r: [
                m[0],
                {**r, "content": "def add(a, b): return b + a"},
                {"role": "user", "content": "ok"},
            ],
            "history_edited",
        ),
        (
            lambda m, r: [{"role": "user", "content": "write sub"}, r, {"role": "user", "content": "ok"}],
            "history_edited",
        ),
        (lambda m, r: [m[0]], "resent_without_reply"),
        (
            lambda m, r: [
                m[0],
                r,
                {"role": "assistant", "content": "mine"},
                {"role": "user", "content": "ok"},
            ],
            "foreign_assistant_message",
        ),
    ],
)
def test_a_changed_history_starts_a_branch_and_never_trains_foreign_tokens(dev_tokenizer, change, reason):
    state = SessionState("s", dev_tokenizer)  # no table: a new record is a branch here (not a session)
    first = [{"role": "user", "content": "write add"}]
    _, g1, reply, _ = answer(state, dev_tokenizer, first, "def add(a, b): return a + b")
    plan, _, _, done = answer(state, dev_tokenizer, change(first, reply), "x")
    assert (plan.forked, done.finished) == (reason, None)
    # the new record holds the whole request as masked context: only its own reply is trainable
    new = state.branches[-1]
    span = new.recorder.turns[0]
    assert len(new.recorder.turns) == 1 and set(new.recorder.masks[: span.start]) == {MASKED}
    # the first branch still waits: its client's next request finishes it, exactly
    _, _, _, later = answer(state, dev_tokenizer, [*first, reply, {"role": "user", "content": "thanks"}], "y")
    trajectory, (turn, _, _) = later.finished
    assert turn == 0 and trajectory.tokens[trajectory.turns[0].start :] == g1.token_ids


def test_branches_are_bounded_and_a_dropped_waiting_turn_is_counted(dev_tokenizer):
    counts = {}
    state = SessionState("s", dev_tokenizer, named=True, max_branches=2)
    state.on_commit = lambda _s, _t, _n, c: counts.update(c)
    for i in range(3):
        answer(state, dev_tokenizer, [{"role": "user", "content": f"side call {i}"}], "ok")
    assert len(state.branches) == 2 and counts.get("turns_dropped_branch_cap") == 1
    assert [b.waiting[0] for b in state.branches] == [1, 2]  # the oldest went


def test_a_session_over_its_token_bound_drops_its_oldest_branch_then_stops_recording(dev_tokenizer):
    counts: dict = {}
    state = SessionState("s", dev_tokenizer, named=True)
    state.on_commit = lambda _s, _t, _n, c: [
        counts.__setitem__(k, counts.get(k, 0) + v) for k, v in c.items()
    ]
    answer(state, dev_tokenizer, [{"role": "user", "content": "one"}], "ok")
    state.max_tokens = bound = 2 * state.tokens - 1  # room for one such branch, not two
    answer(state, dev_tokenizer, [{"role": "user", "content": "two"}], "ok")
    assert len(state.branches) == 1 and state.tokens <= bound and counts["turns_dropped_memory"] == 1
    assert state.branches[0].waiting[0] == 1  # the newer one stays
    answer(state, dev_tokenizer, [{"role": "user", "content": "three " * 40}], "ok")
    assert counts["turns_not_recorded_memory"] == 1 and counts["turns_dropped_memory"] == 1
    assert [b.waiting[0] for b in state.branches] == [1]  # a turn too large to hold pushes out nothing


def test_cut_turn_keeps_only_that_turns_sampled_rows(dev_tokenizer):
    state = SessionState("s", dev_tokenizer)
    answer(state, dev_tokenizer, [{"role": "user", "content": "a"}], "one")
    record = state.branches[0].recorder.trajectories()[-1]
    record.student_topk = {record.turns[0].start: ([1, 2], [-0.1, -2.0])}
    cut = cut_turn(record, 0)
    assert cut.student_topk == record.student_topk and len(cut.tokens) == record.turns[0].end


def test_a_template_that_rewrites_history_still_finishes_turns_and_holds_one_sequence(dev_model_dir):
    """A Qwen3-style template drops past reasoning once a user message follows: the record splits
    into sequences; each turn is still cut exactly from its own, and only the current one is held."""
    from transformers import AutoTokenizer

    from tests.unit.test_transcript_recorder import QWEN3_STYLE

    qwen3 = AutoTokenizer.from_pretrained(dev_model_dir)
    qwen3.chat_template = QWEN3_STYLE
    state = SessionState("s", qwen3, named=True)
    messages, sampled = [{"role": "user", "content": "a"}], []
    for i in range(3):
        text = f"<think>\nstep {i}\n</think>\n\nanswer {i}"
        _, g, reply, done = answer(state, qwen3, messages, text)
        if i:
            trajectory, (turn, _, _) = done.finished
            assert turn == i - 1 and trajectory.tokens[trajectory.turns[0].start :] == sampled[-1].token_ids
        sampled.append(g)
        messages = [*messages, reply, {"role": "user", "content": f"more {i}"}]
    (branch,) = state.branches
    assert len(branch.recorder.finished) == 2 and all(t.tokens == [] for t in branch.recorder.finished)
    assert state.tokens == len(branch.recorder.tokens)
