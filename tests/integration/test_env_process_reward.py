"""AgenticOPDEnv with the process-reward judge on, against the real dev vLLM server: every turn of
every rollout gets its own process reward next to the verifier's outcome score, carried in
`advantages` and re-derived here from the group's own messages."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from hermes_opd.contract.process_reward import parse_prm_block, process_advantages
from hermes_opd.contract.validation import validate_group
from hermes_opd.record.trajectory import TurnSpan
from hermes_opd.record.turn_pairs import extract_turn_pairs
from judge.config import JudgeConfig
from judge.prm_rules_backend import process_verdict
from judge.rules_backend import RulePatterns
from tests.support.env_factory import make_env

pytestmark = pytest.mark.integration


async def _one_group(env) -> dict:
    await env.setup()
    group, backlog = await env.collect_trajectories(await env.get_next_item())
    assert backlog == []
    return group


def _pairs(group: dict, seq: int):
    """The sequence's turn pairs, rebuilt from its messages and the turns' message indices."""
    turns = [
        TurnSpan(t["span"][0], t["span"][1], t["message_index"])
        for t in group["overrides"][seq]["opd"]["turns"]
    ]
    return extract_turn_pairs(SimpleNamespace(messages=group["messages"][seq], turns=turns))


async def test_env_rollouts_get_a_process_reward_per_turn_next_to_the_outcome(dev_server, tmp_path):
    env = make_env(dev_server, tmp_path, group_size=2, max_turns=3, prm_enabled=True, prm_votes=3)
    group = await _one_group(env)
    assert validate_group(group) == []
    patterns = RulePatterns.from_config(JudgeConfig(backend="rules"))
    scored = 0
    for seq, tokens in enumerate(group["tokens"]):
        block = group["overrides"][seq]["prm"]
        turns, problems = parse_prm_block(block, len(tokens))
        assert problems == [] and (block["m"], block["backend"]) == (3, "rules")
        assert [list(t.span) for t in turns] == group["overrides"][seq]["turn_spans"]
        assert group["advantages"][seq] == process_advantages(len(tokens), turns)
        for turn, pair in zip(turns, _pairs(group, seq), strict=True):
            if pair.has_next_state:  # a tool-call turn's tool output, or the verifier's word
                assert (turn.status, turn.score) == ("scored", process_verdict(pair, patterns)[0])
                assert turn.votes["requested"] == 3
                scored += 1
            else:
                assert (turn.status, turn.score, turn.effective) == ("no_next_state", 0, False)
        assert isinstance(group["scores"][seq], float)  # the verifier's outcome, unchanged
        # The OPD part is untouched by the PRM judge: rows only at scored OPD turns (the validator's
        # check above) and the OPD provenance of every turn present.
        assert len(group["overrides"][seq]["opd"]["turns"]) == len(turns)
    assert scored > 0, "no turn of the group had a next state to score"


async def test_env_process_reward_alone_with_the_llm_backend(dev_server, tmp_path):
    # OPD off, the PRM judge on the policy server (the dev model: its answers hold no verdict, so every
    # scored turn gets 0 by no majority, and each session's first scored turn is its effective sample).
    env = make_env(
        dev_server,
        tmp_path,
        group_size=1,
        max_turns=2,
        opd_enabled=False,
        prm_enabled=True,
        prm_judge_backend="llm",
        prm_votes=2,
        prm_judge_max_tokens=16,
        prm_judge_context_char_budget=300,
        prm_judge_turn_char_budget=200,
        prm_judge_next_state_char_budget=200,
    )
    group = await _one_group(env)
    assert env.pipeline is not None and env.pipeline.teacher is None and env.pipeline.judge is None
    assert validate_group(group) == []
    block = group["overrides"][0]["prm"]
    assert block["backend"] == "llm"
    scored = [t for t in block["turns"] if t["status"] == "scored"]
    assert scored, block
    assert all(t["score"] == 0 and t["votes"]["unparsed"] == 2 and t["votes"]["failed"] == 0 for t in scored)
    assert [t["effective"] for t in scored] == [True] + [False] * (len(scored) - 1)
    assert set(group["advantages"][0]) == {0.0}
    assert all(t["status"] == "skipped" for t in group["overrides"][0]["opd"]["turns"])
