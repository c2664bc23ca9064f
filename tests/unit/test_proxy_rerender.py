"""Clients that re-render history (smolagents' ToolCallingAgent re-sends our tool calls as plain
"Calling tools: ..." text and tool results as `user` "Observation: ..." messages): each turn still
finishes with its real next state, cut from its own record, with only its sampled tokens unmasked
(environments/proxy/session.py, rule 2). docs/proxy/sessions.md."""

from __future__ import annotations

import json

from environments.proxy.conversation import Caller, Conversation
from environments.proxy.session import SessionState
from environments.proxy.sessions import SessionTable
from hermes_opd.contract.constants import MASKED
from tests.support.proxy_session import answer

TOOLS = [{"type": "function", "function": {"name": "web_search", "parameters": {"type": "object"}}}]
SYSTEM = {"role": "system", "content": "You are an expert assistant who can solve any task using tool calls."}


def _call(state, tokenizer, messages, call_id, query):
    """Answer with one tool call: (plan, generated, the reply as the client got it, committed)."""
    raw = f'<tool_call>\n{{"name": "web_search", "arguments": {{"q": "{query}"}}}}\n</tool_call>'
    args = {"q": query}
    reply = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": "web_search", "arguments": json.dumps(args)},
            }
        ],
    }
    message = {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": "web_search", "arguments": args}}
        ],
    }
    return answer(state, tokenizer, messages, raw, tools=TOOLS, reply=reply, message=message)


def _smolagents(reply):
    """How smolagents re-sends our tool-call reply: plain text."""
    calls = [
        {
            "id": c["id"],
            "type": "function",
            "function": {"name": c["function"]["name"], "arguments": json.loads(c["function"]["arguments"])},
        }
        for c in reply["tool_calls"]
    ]
    return {"role": "assistant", "content": f"Calling tools:\n{calls}"}


def _only_sampled_unmasked(trajectory, generated):
    (span,) = trajectory.turns
    unmasked = [i for i, m in enumerate(trajectory.masks) if m != MASKED]
    return (
        unmasked == list(range(span.start, span.end))
        and trajectory.tokens[span.start :] == generated.token_ids
    )


def test_a_rerendered_tool_call_turn_trains_on_its_real_next_state(dev_tokenizer):
    counts: dict = {}
    state = SessionState("s", dev_tokenizer, named=True)
    state.on_commit = lambda _s, _t, _n, c: [
        counts.__setitem__(k, counts.get(k, 0) + v) for k, v in c.items()
    ]
    m1 = [SYSTEM, {"role": "user", "content": "New task: what is x?"}]
    p1, g1, r1, _ = _call(state, dev_tokenizer, m1, "call_1a2b", "x")
    m2 = [*m1, _smolagents(r1), {"role": "user", "content": "Observation:\nx is 42"}]
    p2, g2, r2, d2 = _call(state, dev_tokenizer, m2, "call_3c4d", "42")
    assert p2.forked == "history_rerendered"
    trajectory, (turn, _, _) = d2.finished
    assert turn == 0 and trajectory.tokens == p1.context + g1.token_ids  # the OLD record, exactly
    assert _only_sampled_unmasked(trajectory, g1)
    assert trajectory.messages[-1] == {"role": "user", "content": "Observation:\nx is 42"}
    assert trajectory.messages[-2]["tool_calls"][0]["id"] == "call_1a2b"  # our turn, as sampled
    # the new record is the request's messages, all masked context, then this turn's own tokens
    assert set(state.branches[-1].recorder.masks[: len(p2.context)]) == {MASKED}
    m3 = [*m2, _smolagents(r2), {"role": "user", "content": "Observation:\n42 is the answer"}]
    p3, _, _, d3 = answer(state, dev_tokenizer, m3, "x is 42", tools=TOOLS)
    trajectory3, (turn3, _, _) = d3.finished
    assert (
        turn3 == 1
        and trajectory3.tokens == p2.context + g2.token_ids
        and _only_sampled_unmasked(trajectory3, g2)
    )
    assert counts["turns_finished_rerendered"] == 2 and len(state.branches) == 1


def test_an_assistant_message_that_is_not_our_reply_finishes_nothing(dev_tokenizer):
    state = SessionState("s", dev_tokenizer, named=True)
    m1 = [SYSTEM, {"role": "user", "content": "New task: what is x?"}]
    _, _, r1, _ = _call(state, dev_tokenizer, m1, "call_1a2b", "x")
    other = {
        "role": "assistant",
        "content": "Calling tools:\n[{'id': 'call_zzzz', 'function': {'name': 'web_search'}}]",
    }
    plan, _, _, done = answer(
        state, dev_tokenizer, [*m1, other, {"role": "user", "content": "Observation: 1"}], "ok", tools=TOOLS
    )
    assert plan.forked == "history_edited" and done.finished is None
    assert state.branches[0].waiting[0] == 0  # still waiting for its own client


def test_more_than_one_new_assistant_message_is_not_a_rerendering(dev_tokenizer):
    state = SessionState("s", dev_tokenizer, named=True)
    m1 = [SYSTEM, {"role": "user", "content": "New task: what is x?"}]
    _, _, r1, _ = _call(state, dev_tokenizer, m1, "call_1a2b", "x")
    extra = [
        _smolagents(r1),
        {"role": "user", "content": "Observation: 1"},
        {"role": "assistant", "content": "hm"},
        {"role": "user", "content": "go on"},
    ]
    plan, _, _, done = answer(state, dev_tokenizer, [*m1, *extra], "ok", tools=TOOLS)
    assert plan.forked != "history_rerendered" and done.finished is None


def test_a_rerendering_client_without_a_header_is_found_by_its_last_request(dev_tokenizer):
    table = SessionTable(dev_tokenizer)
    caller = Caller("open", True, None)
    m1 = [SYSTEM, {"role": "user", "content": "New task: what is x?"}]
    held, _ = table.resolve(caller, Conversation("m", m1, TOOLS))
    _, g1, r1, _ = _call(held.state, dev_tokenizer, m1, "call_1a2b", "x")
    m2 = [*m1, _smolagents(r1), {"role": "user", "content": "Observation:\nx is 42"}]
    again, created = table.resolve(caller, Conversation("m", m2, TOOLS))
    assert again is held and not created
    _, _, _, done = _call(again.state, dev_tokenizer, m2, "call_3c4d", "42")
    assert done.finished[0].tokens[done.finished[0].turns[0].start :] == g1.token_ids
    assert table.counts["turns_finished_rerendered"] == 1 and len(table) == 1


def test_two_sessions_with_one_first_request_are_told_apart_by_the_call_ids(dev_tokenizer):
    table = SessionTable(dev_tokenizer)
    caller = Caller("open", True, None)
    m1 = [SYSTEM, {"role": "user", "content": "New task: what is x?"}]
    helds, replies = [], []
    for call_id in ("call_aaaa", "call_bbbb"):
        held, _ = table.resolve(caller, Conversation("m", m1, TOOLS))
        replies.append(_call(held.state, dev_tokenizer, m1, call_id, "x")[2])
        helds.append(held)
    m2 = [*m1, _smolagents(replies[1]), {"role": "user", "content": "Observation: 7"}]
    found, _ = table.resolve(caller, Conversation("m", m2, TOOLS))
    assert found is helds[1]
