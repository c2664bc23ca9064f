"""On the real dev vLLM with the Qwen-style dev tokenizer: every scored turn's teacher input is
canonical around the hint, exact everywhere else, rebuilt from provenance alone, and its rows are
reproduced by an independent transformers pass."""

from __future__ import annotations

import pytest
import torch

from hermes_opd.contract.constants import FORMAT_VERSION
from hermes_opd.contract.provenance import sequence_provenance, teacher_input_ids
from hermes_opd.contract.validation import validate_group
from hermes_opd.record.hint_splice import tokenizer_codec
from hermes_opd.record.splice_audit import audit_groups, check_splice
from tests.support.env_factory import make_env
from tests.support.judges import AlwaysHintJudge
from tests.support.oracle import full_logprobs

pytestmark = pytest.mark.integration


async def test_every_scored_turn_is_canonical_at_the_hint_and_exact_elsewhere(
    dev_server, tmp_path, reference_model, dev_tokenizer
):
    env = make_env(dev_server, tmp_path, group_size=2, max_turns=3, distill_topk=50)
    await env.setup()
    env.pipeline.judge = AlwaysHintJudge()
    try:
        group, _ = await env.collect_trajectories(await env.get_next_item())
    finally:
        await env.close()
    assert validate_group(group) == []
    codec = tokenizer_codec(dev_tokenizer)
    scored = merged = 0
    for seq, tokens in enumerate(group["tokens"]):
        provenance = sequence_provenance(group, seq)
        assert provenance.format_version == FORMAT_VERSION
        assert group["overrides"][seq]["opd"]["template_history"] == {
            "tool_append_only": True,
            "user_append_only": True,
            "past_reasoning": "kept",
        }
        for turn in provenance.scored_turns:
            start, end = turn.span
            r0, r1 = turn.replaced_range
            # Rebuilt from tokens + provenance alone.
            ids = teacher_input_ids(tokens, turn)
            assert len(ids) - (end - start) == turn.teacher_prompt_len
            # Exact outside the window: the student's prefix, the rest of the prompt, the turn itself.
            assert ids[:r0] == tokens[:r0]
            assert ids[r0 + len(turn.replacement_ids) :] == tokens[r1:end]
            assert ids[turn.teacher_prompt_len :] == tokens[start:end], "the turn's own ids are never touched"
            # Around the hint the ids are the tokenizer's encoding of their text.
            window, canonical, window_ids, reencoded = check_splice(
                ids, r0, len(turn.replacement_ids), turn.teacher_prompt_len, **codec
            )
            assert canonical, (dev_tokenizer.decode(window_ids), window_ids, reencoded)
            assert "[user's hint / instruction]\n" + turn.hint in dev_tokenizer.decode(window_ids)
            merged += int(r0 < turn.hint_insert_at)
            # Every teacher row is reproduced by a transformers pass over exactly these ids.
            oracle = full_logprobs(reference_model, ids)
            for j in range(end - start):
                pos = turn.teacher_prompt_len + j
                row_ids = group["distill_token_ids"][seq][start + j]
                row_lps = group["distill_logprobs"][seq][start + j]
                assert set(row_ids[:50]) == set(oracle[pos].topk(50).indices.tolist())
                expected = oracle[pos, torch.tensor(row_ids)]
                assert torch.max(torch.abs(torch.tensor(row_lps) - expected)).item() <= 1e-4
            scored += 1
    assert scored > 0
    assert merged > 0, "some task text ends in punctuation that merges with the hint's newlines"
    # The version-1 splice of the same turns is what the tokenizer never writes.
    v1_non_canonical = sum(not check.canonical for check in audit_groups([group], as_v1=True, **codec))
    assert v1_non_canonical >= merged
