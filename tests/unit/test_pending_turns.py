"""Pending turns survive a restart exactly (environments/proxy/pending_turns.py)."""

from __future__ import annotations

from environments.proxy import pending_turns
from environments.proxy.turn_sample import TurnSample
from hermes_opd.record.trajectory import Trajectory, TurnSpan


def test_a_turn_is_saved_and_loaded_exactly_and_a_bad_line_is_counted(tmp_path):
    trajectory = Trajectory(
        tokens=[5, 6, 7, 8],
        masks=[-100, -100, 7, 8],
        inference_logprobs=[1.0, 1.0, -0.2, -0.3],
        messages=[{"role": "user", "content": "q"}],
        turns=[TurnSpan(2, 4, 1)],
        content_ends={0: 2},
        tools=[{"type": "function"}],
        template_history={"append_only": True},
        student_topk={2: ([7, 9], [-0.1, -2.5])},
        finish_reason="stop",
    )
    turn = TurnSample(trajectory, "s", 3, "lora-step2", 2, attempts=4, info={"first_attempt_at": 12.5})
    path = tmp_path / "pending.jsonl"
    assert pending_turns.save(path, [turn, turn]) == 2
    with path.open("ab") as handle:
        handle.write(b'{"format":"other"}\n')
    loaded, bad = pending_turns.load(path)
    assert bad == 1 and loaded == [turn, turn]
    assert pending_turns.save(path, []) == 0 and not path.exists()
    assert pending_turns.load(path) == ([], 0)
