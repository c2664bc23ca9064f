"""Hint insertion (format pinned), teacher input splicing, and turn-pair extraction."""

from __future__ import annotations

import pytest

from hermes_opd.contract.constants import MASKED
from hermes_opd.record.hint import HINT_SEPARATOR, hint_text
from hermes_opd.record.trajectory import Trajectory, TurnSpan
from hermes_opd.record.turn_pairs import extract_turn_pairs, truncate_text


def test_hint_format_is_pinned():
    # Part of the data contract: every teacher distribution depends on these exact characters.
    assert HINT_SEPARATOR == "\n\n[user's hint / instruction]\n"
    assert hint_text("  Run the tests first.  ") == "\n\n[user's hint / instruction]\nRun the tests first."


def make_trajectory() -> Trajectory:
    # [sys 0-2][user 3-5 content ends at 5][gen 6-8][tool 9-10][gen 11-12][user 13-14]
    tokens = list(range(100, 115))
    turns = [TurnSpan(6, 9, 2), TurnSpan(11, 13, 4)]
    masks = [t if any(s.start <= i < s.end for s in turns) else MASKED for i, t in enumerate(tokens)]
    messages = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "task"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"function": {"name": "terminal", "arguments": {}}}],
        },
        {"role": "tool", "name": "terminal", "content": "x" * 50},
        {"role": "assistant", "content": "done"},
        {"role": "user", "content": "tests fail", "name": "verifier"},
    ]
    return Trajectory(
        tokens=tokens,
        masks=masks,
        inference_logprobs=[1.0 if m == MASKED else -0.5 for m in masks],
        messages=messages,
        turns=turns,
        content_ends={0: 2, 1: 5, 3: 10},
    )


def test_hint_anchor_is_after_the_last_user_message_before_the_turn():
    traj = make_trajectory()
    assert traj.hint_anchor(traj.turns[1]) == 5, "after the content of the last user message before the turn"


def test_turn_pairs_cover_tool_call_turns_and_verifier_feedback():
    pairs = extract_turn_pairs(make_trajectory(), max_next_state_chars=10)
    assert [p.next_state_role for p in pairs] == ["tool", "user"]
    assert pairs[0].next_state_text.startswith("[terminal]\n" + "x" * 10)
    assert "truncated 40 characters" in pairs[0].next_state_text
    assert pairs[1].next_state_text == "tests fail"
    assert [m["role"] for m in pairs[1].context_messages] == ["system", "user", "assistant", "tool"]


def test_last_turn_without_next_state():
    traj = make_trajectory()
    traj.messages = traj.messages[:5]
    pairs = extract_turn_pairs(traj)
    assert pairs[-1].next_state_role is None and not pairs[-1].has_next_state


def test_truncate_text():
    assert truncate_text("abc", 5) == "abc"
    assert truncate_text("abcdef", 2) == "ab\n[... truncated 4 characters ...]"


def test_trajectory_invariants_are_checked():
    traj = make_trajectory()
    with pytest.raises(ValueError, match="outside every turn span but unmasked"):
        Trajectory(tokens=traj.tokens, masks=[5] * 15, inference_logprobs=[0.0] * 15, turns=traj.turns)
    with pytest.raises(ValueError, match="lengths differ"):
        Trajectory(tokens=[1, 2], masks=[MASKED], inference_logprobs=[1.0, 1.0])
