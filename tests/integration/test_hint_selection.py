"""Every hint choice policy in real rollouts against the real dev vLLM (policy and teacher), the
in-process teacher included: the group is valid, every scored turn records its candidates, scores and
winner, provenance re-derives the hint, and a teacher policy's winning score is re-derived from the
group's own distill rows. The judge is a stand-in that gives three different +1 hints (judge
behaviour is not what is tested here)."""

from __future__ import annotations

import pytest

from hermes_opd.contract.provenance import rederive_hint
from hermes_opd.contract.validation import validate_group
from judge.hint_choice import position_overlaps
from tests.support.env_factory import make_env
from tests.support.judges import HINTS, ThreeHintsJudge

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    ("policy", "teacher_path"),
    [
        ("representative", "auto"),
        ("longest", "auto"),
        ("shortest", "auto"),
        ("teacher_overlap", "auto"),
        ("token_optimal", "auto"),
        ("teacher_overlap", "transformers"),
    ],
)
async def test_every_policy_in_real_rollouts(dev_server, tmp_path, policy, teacher_path):
    k = 3
    extra = {"teacher_local_model_dir": str(dev_server.model_dir)} if teacher_path == "transformers" else {}
    env = make_env(
        dev_server,
        tmp_path,
        group_size=2,
        max_turns=2,
        distill_topk=k,
        hint_choice=policy,
        teacher_path=teacher_path,
        **extra,
    )
    await env.setup()
    env.pipeline.judge = ThreeHintsJudge()
    group, _ = await env.collect_trajectories(await env.get_next_item())
    assert validate_group(group) == []
    scored = 0
    for seq, tokens in enumerate(group["tokens"]):
        for turn in group["overrides"][seq]["opd"]["turns"]:
            if turn["status"] != "scored":
                continue
            scored += 1
            selection = turn["hint_selection"]
            assert selection["policy"] == policy
            assert rederive_hint(turn) == turn["hint"]
            if policy in ("teacher_overlap", "token_optimal"):
                assert selection["candidates"] == list(HINTS)
                assert selection["student_k"] == 1
                start, end = turn["span"]
                rows = group["distill_token_ids"][seq][start:end]
                overlaps = position_overlaps(rows, [[t] for t in tokens[start:end]], k)
                assert selection["scores"][selection["winner"]][-1] == float(sum(overlaps))
            else:
                assert selection["candidates"] == list(HINTS)
                expected = {"longest": 1, "shortest": 2}.get(policy)
                if expected is not None:
                    assert turn["hint"] == HINTS[expected]
    assert scored > 0
