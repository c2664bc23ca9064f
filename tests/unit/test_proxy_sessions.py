"""The proxy's session table (environments/proxy/sessions.py): sessions found by the clients' own
headers or by their history, side calls and no-train requests kept apart, two clients with one
history kept apart, per-key caps and eviction, memory bounded and returned. docs/proxy/sessions.md."""

from __future__ import annotations

import asyncio

import pytest

from environments.proxy.conversation import Caller, Conversation
from environments.proxy.sessions import SessionTable, session_id_from_headers
from tests.support.proxy_session import answer


def _ask(table, tokenizer, messages, text, owner="open", session_id=None, may_train=True, **kw):
    held, created = table.resolve(Caller(owner, may_train, session_id), Conversation("m", messages))
    plan, g, reply, done = answer(held.state, tokenizer, messages, text, **kw)
    return held, created, plan, reply, done


def _tracked_empty(table):
    return (
        len(table),
        table.tokens_held,
        table._by_reply,
        table._by_request,
        table._continued,
        table._indexed,
        table._tokens,
        dict(table._owner_tokens),
        dict(table._owner_sessions),
    )


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"session-id": "codex-1", "X-Session-Id": "mine"}, "codex-1"),
        ({"x-claude-code-session-id": "cc-1", "X-Session-Id": "mine"}, "cc-1"),
        ({"X-SESSION-ID": " mine "}, "mine"),
        ([("X-Session-Id", "first"), ("x-session-id", "second")], "first"),
        ({"session-id": "", "X-Session-Id": "mine"}, "mine"),
        ({"session-id": "a\nb", "X-Session-Id": "mine"}, "mine"),
        ({"X-Session-Id": "x" * 257}, None),
        ({"Authorization": "Bearer k"}, None),
    ],
)
def test_the_session_id_comes_from_the_clients_own_header_first(headers, expected):
    assert session_id_from_headers(headers) == expected


def test_a_session_is_found_again_by_its_history_without_a_header(dev_tokenizer):
    table = SessionTable(dev_tokenizer)
    m1 = [{"role": "user", "content": "a"}]
    held, created, _, r1, _ = _ask(table, dev_tokenizer, m1, "one")
    assert created and len(table) == 1
    again, created2, plan, _, done = _ask(
        table, dev_tokenizer, [*m1, r1, {"role": "user", "content": "b"}], "two"
    )
    assert again is held and not created2 and plan.forked is None and done.finished is not None
    assert table.counts["turns_finished"] == 1


def test_a_side_call_with_the_main_sessions_header_neither_joins_nor_stops_it(dev_tokenizer):
    """Claude Code's title generator sends the main session's id with an unrelated short history."""
    table = SessionTable(dev_tokenizer)
    main = [{"role": "system", "content": "you code"}, {"role": "user", "content": "write add"}]
    held, _, _, r1, _ = _ask(table, dev_tokenizer, main, "def add(a, b): return a + b", session_id="cc-1")
    side, _, plan, _, side_done = _ask(
        table, dev_tokenizer, [{"role": "user", "content": "title this"}], "Add", session_id="cc-1"
    )
    assert side is held and plan.forked == "unrelated_history" and side_done.finished is None
    _, _, plan2, _, done = _ask(
        table, dev_tokenizer, [*main, r1, {"role": "user", "content": "now sub"}], "ok", session_id="cc-1"
    )
    assert plan2.forked is None
    trajectory, (turn, _, _) = done.finished
    assert turn == 0 and trajectory.messages[-1]["content"] == "now sub"
    # a side call that comes first (Claude Code titles before its main request): the main
    # conversation is a branch of its own, and neither is counted as a fork
    _ask(table, dev_tokenizer, [{"role": "user", "content": "title that"}], "Sub", session_id="cc-2")
    _, _, plan3, _, _ = _ask(table, dev_tokenizer, main, "def sub(a, b): return a - b", session_id="cc-2")
    assert plan3.forked == "unrelated_history"
    assert table.counts["branches_unrelated_history"] == 2
    assert not [k for k in table.counts if k.startswith("forks_")], dict(table.counts)


def test_a_no_train_request_without_a_header_never_matches_a_training_session(dev_tokenizer):
    table = SessionTable(dev_tokenizer)
    m1 = [{"role": "user", "content": "a"}]
    held, _, _, r1, _ = _ask(table, dev_tokenizer, m1, "one")
    follow = [*m1, r1, {"role": "user", "content": "b"}]
    private, created, _, _, done = _ask(table, dev_tokenizer, follow, "two", may_train=False)
    assert private is not held and created and done.finished is None and done.recorded_turn is None
    assert table.find("open", private.state.session_id) is None and len(table) == 1
    assert table.counts["not_for_training"] == 1
    # the training client's own next request still finishes its turn
    again, _, _, _, done2 = _ask(table, dev_tokenizer, follow, "two")
    assert again is held and done2.finished is not None


def test_two_clients_continuing_one_history_do_not_continue_each_others_session(dev_tokenizer):
    table = SessionTable(dev_tokenizer)
    m1 = [{"role": "user", "content": "a"}]
    held, _, _, r1, _ = _ask(table, dev_tokenizer, m1, "one")
    _, _, _, _, first = _ask(
        table, dev_tokenizer, [*m1, r1, {"role": "user", "content": "from client A"}], "x"
    )
    other, created, plan, _, second = _ask(
        table, dev_tokenizer, [*m1, r1, {"role": "user", "content": "from B"}], "y"
    )
    assert first.finished is not None and second.finished is None
    assert other is not held and created and plan.forked == "history_already_continued"
    assert table.counts["history_collisions"] == 1 and len(table) == 2


def test_two_clients_resolved_together_still_get_sessions_of_their_own(dev_tokenizer):
    """Both requests found the session before either committed: the second starts its own."""
    table = SessionTable(dev_tokenizer)
    m1 = [{"role": "user", "content": "a"}]
    held, _, _, r1, _ = _ask(table, dev_tokenizer, m1, "one")
    a = [*m1, r1, {"role": "user", "content": "from client A"}]
    b = [*m1, r1, {"role": "user", "content": "from client B"}]
    held_a, _ = table.resolve(Caller("open", True, None), Conversation("m", a))
    held_b, _ = table.resolve(Caller("open", True, None), Conversation("m", b))
    assert held_a is held_b is held
    _, _, _, done_a = answer(held.state, dev_tokenizer, a, "x")
    plan_b, _, _, done_b = answer(held.state, dev_tokenizer, b, "y")
    assert done_a.finished is not None and done_b.finished is None
    assert (
        plan_b.forked == "history_already_continued" and done_b.recorded_session_id != held.state.session_id
    )
    assert (
        table.find("open", done_b.recorded_session_id) is not None and table.counts["history_collisions"] == 1
    )


def test_keys_never_share_sessions_even_with_one_history(dev_tokenizer):
    table = SessionTable(dev_tokenizer)
    m1 = [{"role": "user", "content": "a"}]
    _, _, _, r1, _ = _ask(table, dev_tokenizer, m1, "one", owner="key-a")
    _, created, _, _, done = _ask(
        table, dev_tokenizer, [*m1, r1, {"role": "user", "content": "b"}], "two", owner="key-b"
    )
    assert created and done.finished is None


def test_one_key_at_its_cap_pushes_out_only_its_own_sessions(dev_tokenizer):
    table = SessionTable(dev_tokenizer, max_sessions=4, max_sessions_per_key=2)
    for owner in ("key-a", "key-b"):
        for i in range(2):
            _ask(table, dev_tokenizer, [{"role": "user", "content": f"{owner} {i}"}], "ok", owner=owner)
    oldest_a = next(iter(table.sessions.values()))
    _ask(table, dev_tokenizer, [{"role": "user", "content": "key-a 2"}], "ok", owner="key-a")
    owners = [h.owner for h in table.sessions.values()]
    assert owners.count("key-a") == 2 and owners.count("key-b") == 2 and oldest_a.key not in table.sessions
    assert (table.counts["sessions_evicted_key_cap"], table.counts["turns_evicted"]) == (1, 1)
    assert table.counts.get("turns_ended_without_next_state_idle", 0) == 0


def test_at_the_global_cap_a_key_pushes_out_only_a_larger_keys_sessions(dev_tokenizer):
    table = SessionTable(dev_tokenizer, max_sessions=3)
    for i in range(3):
        _ask(table, dev_tokenizer, [{"role": "user", "content": f"a {i}"}], "ok", owner="key-a")
    _ask(table, dev_tokenizer, [{"role": "user", "content": "b 0"}], "ok", owner="key-b")
    assert sorted(h.owner for h in table.sessions.values()) == ["key-a", "key-a", "key-b"]
    _ask(table, dev_tokenizer, [{"role": "user", "content": "b 1"}], "ok", owner="key-b")  # a has 2 > 1
    _ask(
        table, dev_tokenizer, [{"role": "user", "content": "b 2"}], "ok", owner="key-b"
    )  # b has 2, a 1: its own
    assert sorted(h.owner for h in table.sessions.values()) == ["key-a", "key-b", "key-b"]
    assert table.counts["sessions_evicted_session_cap"] == 3


def test_a_session_in_use_is_never_evicted_and_the_new_turn_is_served_unrecorded(dev_tokenizer):
    table = SessionTable(dev_tokenizer, max_sessions=1)
    busy, _, _, _, _ = _ask(table, dev_tokenizer, [{"role": "user", "content": "a"}], "ok")

    async def hold_and_ask():
        async with busy.lock:
            return _ask(table, dev_tokenizer, [{"role": "user", "content": "b"}], "ok")

    _, _, _, _, done = asyncio.run(hold_and_ask())
    assert done.recorded_turn is None and table.counts["turns_not_recorded_session_cap"] == 1
    assert list(table.sessions.values()) == [busy]


def test_memory_is_bounded_in_total_and_returned_when_a_session_ends(dev_tokenizer):
    table = SessionTable(dev_tokenizer)
    held, _, _, r1, _ = _ask(table, dev_tokenizer, [{"role": "user", "content": "a"}], "one", session_id="s1")
    one = table.tokens_held
    assert one == held.state.tokens > 0
    table.max_held_tokens = 2 * one + one // 2
    for i in range(3):
        _ask(table, dev_tokenizer, [{"role": "user", "content": "b"}], "one", session_id=f"s{i + 2}")
    assert table.tokens_held <= table.max_held_tokens and table.counts["sessions_evicted_memory"] == 2
    assert table.tokens_held == sum(h.state.tokens for h in table.sessions.values())
    for held in list(table.sessions.values()):
        table.end(held, "ended")
    assert _tracked_empty(table) == (0, 0, {}, {}, {}, {}, {}, {}, {})
    assert table.counts["turns_ended_without_next_state_ended"] == 2


def test_idle_sessions_end_counted_and_empty_ones_from_failed_requests_go(dev_tokenizer):
    now = [0.0]
    table = SessionTable(dev_tokenizer, clock=lambda: now[0])
    _ask(table, dev_tokenizer, [{"role": "user", "content": "a"}], "one")
    table.resolve(Caller("open", True, "failed-1"), Conversation("m", [{"role": "user", "content": "x"}]))
    assert len(table) == 2  # the named session exists while its request runs
    now[0] = 10.0
    assert table.sweep(5.0) == 2 and len(table) == 0 and table.tokens_held == 0
    assert (
        table.counts["turns_ended_without_next_state_idle"] == 1
        and table.counts["sessions_ended_unused"] == 1
    )


def test_named_sessions_no_request_committed_to_are_bounded_per_key(dev_tokenizer):
    table = SessionTable(dev_tokenizer, max_sessions=8, max_sessions_per_key=2)
    for i in range(10):  # each request fails after resolve: nothing commits
        table.resolve(Caller("key-a", True, f"s{i}"), Conversation("m", [{"role": "user", "content": "x"}]))
    assert len(table) <= 2


def test_a_request_re_sent_in_a_named_session_replaces_the_answer_its_client_never_got(dev_tokenizer):
    table = SessionTable(dev_tokenizer)
    m1 = [{"role": "user", "content": "a"}]
    _, _, _, r1, _ = _ask(table, dev_tokenizer, m1, "one", session_id="s")
    m2 = [*m1, r1, {"role": "user", "content": "b"}]
    held, _, _, lost, _ = _ask(table, dev_tokenizer, m2, "two", session_id="s")  # the answer never arrives
    _, _, plan, r2, done = _ask(table, dev_tokenizer, m2, "deux", session_id="s")
    assert plan.forked == "request_retried" and done.finished is None
    assert len(held.state.branches) == 1 and table.counts["turns_dropped_request_retried"] == 1
    _, _, plan3, _, done3 = _ask(
        table, dev_tokenizer, [*m2, r2, {"role": "user", "content": "c"}], "x", session_id="s"
    )
    assert plan3.forked is None and done3.finished[1][0] == 2  # the retried turn, not the lost one


def test_a_hostile_history_is_compared_without_raising():
    """Arguments nested past what Python's JSON parser takes, calls that are not objects: kept as
    written, compared as text."""
    from environments.proxy.history import comparable, template_form

    deep = "[" * 100_000 + "]" * 100_000
    message = {
        "role": "assistant",
        "content": "x",
        "tool_calls": [
            {"id": "c", "function": {"name": "f", "arguments": deep}},
            {"id": 1, "function": "oops"},
            "x",
        ],
    }
    assert comparable(message)[3][0][2] == f'"{deep}"'
    assert template_form([message])[0]["tool_calls"][0]["function"]["arguments"] == deep
    table = SessionTable(None)
    held, created = table.resolve(
        Caller("open", True, None), Conversation("m", [message, {"role": "user", "content": "y"}])
    )
    assert created and len(table) == 0
