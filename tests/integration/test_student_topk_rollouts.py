"""The student's own top-K recorded into real groups: the env with `student_topk_k: 4` against the real
dev vLLM (policy and vLLM teacher), the group checked by `hermes-opd validate`, and one torch trainer
step with `opd_vocab: student_topk` that consumes the block."""

from __future__ import annotations

import json

import pytest
import torch

from environments.delivery.student_topk_check import check_policy_top_logprobs
from hermes_opd.commands.validate import main as validate_main
from hermes_opd.contract.constants import MASKED
from hermes_opd.contract.errors import ConfigError
from hermes_opd.contract.provenance import sequence_provenance, teacher_input_ids
from hermes_opd.contract.validation import validate_group
from hermes_opd.vllm_api.client import VLLMCompletionsClient
from judge.hint_choice import position_overlaps
from tests.support.bench import assert_shape, run_bench
from tests.support.env_factory import make_env
from tests.support.judges import AlwaysHintJudge, ThreeHintsJudge
from tests.support.oracle import full_logprobs

pytestmark = pytest.mark.integration

K = 4


class TopRowsCapture:
    """Records the top-K rows vLLM returned for each (context, generated ids)."""

    def __init__(self, env) -> None:
        self.rows: dict[tuple[tuple[int, ...], tuple[int, ...]], tuple[list, list]] = {}
        self._inner = env.server.tokens_and_logprobs_completion
        env.server.tokens_and_logprobs_completion = self

    async def __call__(self, **kwargs):
        result = await self._inner(**kwargs)
        assert kwargs["top_logprobs"] == K  # the env asked the policy for its top-K
        self.rows[(tuple(kwargs["input_ids"]), tuple(result[1][0]))] = result[4][0]
        return result


async def test_env_records_student_topk_and_a_trainer_step_consumes_it(dev_server, dev_model_dir, tmp_path):
    # A teacher top-4 (not the default 50) so that some student ids fall outside the teacher's rows.
    env = make_env(dev_server, tmp_path, group_size=2, max_turns=3, student_topk_k=K, distill_topk=4)
    await env.setup()
    env.pipeline.judge = AlwaysHintJudge()
    capture = TopRowsCapture(env)
    group, _ = await env.collect_trajectories(await env.get_next_item())
    assert validate_group(group) == []
    path = tmp_path / "groups.jsonl"
    path.write_text(json.dumps(group) + "\n")
    assert validate_main([str(path)]) == 0  # what `hermes-opd validate groups.jsonl` runs

    scored_positions = unknown = known = 0
    for seq, tokens in enumerate(group["tokens"]):
        block = group["overrides"][seq]["student_topk"]
        assert (block["version"], block["k"]) == (1, K)
        assert block["positions"] == [p for p, m in enumerate(group["masks"][seq]) if m != MASKED]
        assert [len(r) for r in block["ids"]] == [K] * len(block["positions"])
        assert [len(r) for r in block["logprobs"]] == [K] * len(block["positions"])
        at = {pos: j for j, pos in enumerate(block["positions"])}
        for start, end in group["overrides"][seq]["turn_spans"]:
            # Each turn's rows are exactly the ones vLLM returned with that generation.
            top_ids, top_lps = capture.rows[(tuple(tokens[:start]), tuple(tokens[start:end]))]
            assert [block["ids"][at[p]] for p in range(start, end)] == top_ids
            assert [block["logprobs"][at[p]] for p in range(start, end)] == top_lps
        turns = group["overrides"][seq]["opd"]["turns"]
        scored = {p for t in turns if t["status"] == "scored" for p in range(*t["span"])}
        for j, pos in enumerate(block["positions"]):
            teacher = block["teacher_logprobs"][j]
            if pos not in scored:
                assert teacher == []
                continue
            scored_positions += 1
            row = dict(
                zip(group["distill_token_ids"][seq][pos], group["distill_logprobs"][seq][pos], strict=True)
            )
            for token_id, value in zip(block["ids"][j], teacher, strict=True):
                # Known exactly where the teacher's row (its top-4 plus the sampled token) holds the id;
                # unknown (null) everywhere else, never invented.
                assert value == row.get(token_id), (seq, pos, token_id)
                unknown += value is None
                known += value is not None
        assert block["teacher_unknown"] == sum(v is None for r in block["teacher_logprobs"] for v in r)
    assert scored_positions > 0 and known > 0
    assert unknown > 0, "a teacher top-4 against a student top-4 leaves some student ids unknown"
    record = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[-1])
    assert record["opd/student_topk_ids_scored"] == known + unknown
    assert record["opd/student_topk_teacher_unknown_frac"] == pytest.approx(unknown / (known + unknown))

    from tests.support.torch_trainer import make_config
    from trainer_adapters.torch_trainer import TorchTrainer

    config = make_config(
        dev_model_dir,
        tmp_path,
        loss__opd_vocab="student_topk",
        atropos__max_token_len=max(len(t) for t in group["tokens"]) + 1,
        optim__micro_batch_size=2,
    )
    trainer = TorchTrainer(config)
    metrics = trainer.train_step([group])
    assert trainer.step == 1
    # Per teacher position: the student ids the teacher's row lacks and whose logprob is unknown.
    assert metrics["opd/student_topk_unknown"] == pytest.approx(unknown / scored_positions, rel=1e-6)
    assert metrics["opd/student_topk_extra"] >= metrics["opd/student_topk_unknown"]


async def test_a_policy_server_that_refuses_k_logprobs_fails_the_setup_check(dev_server, dev_tokenizer):
    # The dev server allows 100 logprobs (hermes-opd dev-server --max-logprobs 100); ask for more.
    client = VLLMCompletionsClient(dev_server.base_url, dev_server.model_name)
    try:
        await check_policy_top_logprobs(client, K, dev_tokenizer)  # allowed: no error
        with pytest.raises(ConfigError, match=r"env.student_topk_k=101 .*--max-logprobs 101"):
            await check_policy_top_logprobs(client, 101, dev_tokenizer)
    finally:
        await client.close()


async def test_in_process_teacher_fills_every_student_id_exactly(dev_server, tmp_path, reference_model):
    # The in-process teacher (teacher_path: transformers) reads each student id from its full
    # distribution: nothing unknown, every value equal to an independent forward of the teacher input.
    # `teacher_overlap` scores three candidate hints over a shared prefix, and now compares the
    # teacher's top-k with the student's recorded top-K (student_k = K in the provenance).
    env = make_env(
        dev_server,
        tmp_path,
        group_size=2,
        max_turns=2,
        student_topk_k=K,
        distill_topk=3,
        teacher_path="transformers",
        teacher_local_model_dir=str(dev_server.model_dir),
        hint_choice="teacher_overlap",
    )
    await env.setup()
    env.pipeline.judge = ThreeHintsJudge()
    group, _ = await env.collect_trajectories(await env.get_next_item())
    assert validate_group(group) == []
    checked = 0
    for seq, tokens in enumerate(group["tokens"]):
        block = group["overrides"][seq]["student_topk"]
        assert block["teacher_unknown"] == 0
        at = {pos: j for j, pos in enumerate(block["positions"])}
        turns = group["overrides"][seq]["opd"]["turns"]
        for index, turn in enumerate(turns):
            if turn["status"] != "scored":
                continue
            start, end = turn["span"]
            selection = turn["hint_selection"]
            assert selection["student_k"] == K
            student_rows = [block["ids"][at[p]] for p in range(start, end)]
            rows = group["distill_token_ids"][seq][start:end]
            overlaps = position_overlaps(rows, student_rows, 3)
            assert selection["scores"][selection["winner"]][-1] == float(sum(overlaps))
            teacher_ids = teacher_input_ids(tokens, sequence_provenance(group, seq).turns[index])
            oracle = full_logprobs(reference_model, teacher_ids)
            for j in range(end - start):
                ids, values = block["ids"][at[start + j]], block["teacher_logprobs"][at[start + j]]
                want = oracle[turn["teacher_prompt_len"] + j, torch.tensor(ids)].tolist()
                # float32 on both sides, the teacher's batch of three candidate hints against one
                # forward: 1.05e-5 at most measured (a suite run), so 5e-5; a wrong position is > 1e-2
                assert max(abs(v - w) for v, w in zip(values, want, strict=True)) <= 5e-5
                checked += 1
    assert checked > 0


def test_student_topk_bench_quick_reports_both_sides_of_one_run(capsys, dev_server):
    argv = [
        "student-topk",
        "--quick",
        "--policy-url",
        dev_server.base_url,
        "--model",
        dev_server.model_name,
        "--tokenizer",
        str(dev_server.model_dir),
    ]
    result = run_bench(capsys, argv)
    assert_shape(result, "with_over_without")
    assert result["with_over_without"] == pytest.approx(
        result["with_s"] / result["without_s"], rel=1e-3
    )  # printed rounded
    assert result["rows_well_formed"] == result["generated_positions"] == result["generated_tokens_with"] > 0
    assert len(result["pair_ratios"]) == result["iters"] == 2
    assert result["load_avg_1m_end"] >= 0 and "load_avg_1m" in result["machine"]


def test_process_with_student_topk_writes_valid_blocks(dev_server, tmp_path):
    # `hermes-opd process --env.student_topk_k 4`: the preflight probes the policy for 4 logprobs,
    # and every sequence of the file carries a block over its generated positions.
    import subprocess

    from hermes_opd.commands.validate import validate_jsonl
    from tests.support.process_job import REPO, _job_argv, _records

    out = tmp_path / "groups.jsonl"
    argv = _job_argv(dev_server, out, 1, "--env.student_topk_k", str(K))
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert validate_jsonl(out).clean
    (group,) = _records(out)
    for seq, masks in enumerate(group["masks"]):
        block = group["overrides"][seq]["student_topk"]
        assert block["k"] == K
        assert block["positions"] == [p for p, m in enumerate(masks) if m != MASKED]
