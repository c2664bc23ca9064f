"""scoring/teacher_rows.py: the vectorized turn normalization equals `normalize_row` row for row (values and
errors), and the generate route's body parses to the same rows as the completions route's."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest

from scoring.path_choice import GenerateProbe, choose_path
from scoring.response_parsing import parse_prompt_topk_json
from scoring.teacher_rows import normalize_row, normalize_turn_rows, rows_from_topk_arrays


def outcome(fn):
    try:
        return ("ok", fn())
    except ValueError as exc:
        return ("error", str(exc))


def random_turn(rng: random.Random, n: int, k: int, vocab: int = 300):
    """Rows the way the parser hands them over: top-k in rank order, the student's token appended
    when it ranks below k; now and then a defect."""
    cand_ids, cand_lps, students = [], [], []
    for _ in range(n):
        weights = [rng.random() ** 3 + 1e-9 for _ in range(vocab)]
        total = math.fsum(weights)
        lps = [math.log(w / total) for w in weights]
        order = sorted(range(vocab), key=lambda i: -lps[i])
        student = rng.randrange(vocab)
        ids = order[:k]
        if student not in ids:
            ids = ids + [student]
        row_lps = [lps[i] for i in ids]
        if rng.random() < 0.1:  # ties, tiny positive noise
            row_lps[1] = row_lps[0]
            row_lps[0] = min(5e-7, row_lps[0] + 1.0) if rng.random() < 0.5 else row_lps[0]
        cand_ids.append(ids)
        cand_lps.append(row_lps)
        students.append(student)
    return cand_ids, cand_lps, students


@pytest.mark.parametrize("seed", range(40))
def test_turn_rows_equal_per_row_normalization(seed):
    rng = random.Random(seed)
    k = rng.choice([1, 2, 5, 20, 50])
    cand_ids, cand_lps, students = random_turn(rng, rng.randrange(1, 30), k)
    defect = seed % 8
    if defect == 1:
        cand_lps[0][-1] = float("nan")
    elif defect == 2:
        cand_lps[-1][0] = 0.01  # positive
    elif defect == 3:
        cand_ids[0] = cand_ids[0][:-1] + [cand_ids[0][0]]  # duplicate id
    elif defect == 4:
        students[0] = 10_000  # nowhere among the candidates
    elif defect == 5:
        cand_lps[0] = [lp + 2.0 for lp in cand_lps[0]]  # not one distribution
    expected = outcome(
        lambda: tuple(
            map(
                list,
                zip(
                    *[
                        normalize_row(i, lp, s, None, k)
                        for i, lp, s in zip(cand_ids, cand_lps, students, strict=True)
                    ],
                    strict=True,
                ),
            )
        )
    )
    got = outcome(lambda: normalize_turn_rows(cand_ids, cand_lps, students, k))
    if expected[0] == "ok":
        assert got[0] == "ok"
        assert got[1][0] == expected[1][0] and got[1][1] == expected[1][1]  # bit for bit
    else:
        assert got == expected


def test_short_rows_and_arrays_match_normalize_row():
    # fewer than k candidates: the student joins in sorted position (normalize_row's rule)
    assert normalize_turn_rows([[1, 2]], [[-1.0, -3.0]], [2], 5) == ([[1, 2]], [[-1.0, -3.0]])
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(6, 40))
    logprobs = logits - np.log(np.exp(logits).sum(1, keepdims=True))
    top_ids = np.argsort(-logprobs, axis=1)[:, :5]
    top_lps = np.take_along_axis(logprobs, top_ids, axis=1)
    students = np.array([top_ids[0, 2], 39, 0, 7, top_ids[4, 0], 11])
    student_lps = logprobs[np.arange(6), students]
    got = rows_from_topk_arrays(top_ids, top_lps, students, student_lps, 5)
    for j in range(6):
        ids = top_ids[j].tolist()
        lps = top_lps[j].tolist()
        if students[j] not in ids:
            ids, lps = ids + [int(students[j])], lps + [float(student_lps[j])]
        assert (got[0][j], got[1][j]) == normalize_row(ids, lps, int(students[j]), None, 5)
        assert len(got[0][j]) == (5 if students[j] in top_ids[j] else 6)


def test_generate_body_parses_like_the_completions_body():
    ids = [3, 9, 4, 1]
    entries = [None] + [
        {
            str(t): {"logprob": -0.25, "rank": 1, "decoded_token": None},
            "7": {"logprob": -2.0, "rank": 2, "decoded_token": None},
        }
        for t in ids[1:]
    ]
    completions = json.dumps({"choices": [{"prompt_logprobs": entries}]}).encode()
    generate = json.dumps({"prompt_logprobs": entries, "choices": [{"index": 0, "token_ids": [5]}]}).encode()
    for from_pos in (0, 2):
        a = parse_prompt_topk_json(completions, ids, 2, from_pos=from_pos)
        b = parse_prompt_topk_json(generate, ids, 2, from_pos=from_pos, route="generate")
        assert a == b and b.token_ids[-1] == [1, 7] and b.logprobs[-1] == [-0.25, -2.0]
    with pytest.raises(Exception, match="without prompt_logprobs"):
        parse_prompt_topk_json(b'{"prompt_logprobs": null}', ids, 2, route="generate")


def test_auto_path_rule():
    assert choose_path("auto", "/models/x", None).path == "transformers"
    assert choose_path("auto", None, GenerateProbe(200)).path == "generate"
    fallback = choose_path("auto", None, GenerateProbe(404, "Not Found"))
    assert fallback.path == "completions" and "HTTP 404" in fallback.reason
    assert "--enable-scale-out" in fallback.reason
    assert choose_path("auto", None, GenerateProbe(None, "refused")).path == "completions"
    assert choose_path("generate", None, None).reason == "configured"
    with pytest.raises(ValueError, match="local_model_dir"):
        choose_path("transformers", None, None)
    with pytest.raises(ValueError, match="unknown teacher path"):
        choose_path("sglang", None, None)


def test_shortest_float32_equals_round_logprobs_bit_for_bit():
    from hermes_opd.contract.rows import round_logprobs
    from scoring.teacher_rows import shortest_float32

    rng = np.random.default_rng(3)
    bits = rng.integers(0x80000000, 0xFF7FFFFF, size=20000, dtype=np.uint64).astype(np.uint32)
    values = np.concatenate(
        [
            bits.view(np.float32).astype(np.float64),  # every negative finite float32 magnitude
            -rng.random(5000) * 30,  # typical logprobs
            [-0.0, 0.0, -1e-45, -3.4028234663852886e38, -1.1754943508222875e-38],
        ]
    )
    assert shortest_float32(values).tolist() == round_logprobs(values.tolist())


def test_in_process_scorer_equal_length_batch_matches_the_oracle(dev_model_dir, reference_model):
    from scoring.transformers_scorer import TransformersTeacher
    from tests.support.oracle import full_logprobs

    rng = random.Random(5)
    inputs = [([rng.randrange(3000) for _ in range(120)], 100) for _ in range(2)]  # one length: no mask
    teacher = TransformersTeacher(str(dev_model_dir), 20)
    out = teacher.score_batch(inputs)
    for (ids, prompt_len), (ids_rows, lp_rows) in zip(inputs, out, strict=True):
        oracle = full_logprobs(reference_model, ids)
        for j, (row_ids, row_lps) in enumerate(zip(ids_rows, lp_rows, strict=True)):
            pos = prompt_len + j
            assert set(row_ids[:20]) == set(oracle[pos].topk(20).indices.tolist())
            assert ids[pos] in row_ids
            assert (
                max(abs(lp - float(oracle[pos, t])) for t, lp in zip(row_ids, row_lps, strict=True)) <= 1e-4
            )


@pytest.mark.parametrize("scale_out", [True, False])
async def test_auto_against_the_fake_endpoint(scale_out):
    from hermes_opd.devkit.fake_endpoints import FakeSettings, FakeVLLM
    from hermes_opd.vllm_api.client import VLLMCompletionsClient
    from scoring.teacher import TeacherScorer

    settings = FakeSettings(teacher_latency_s=0.0, vocab_size=512)
    async with FakeVLLM(model="m", settings=settings, scale_out=scale_out) as fake:
        teacher = TeacherScorer(VLLMCompletionsClient(fake.base_url, "m"), k=5)
        ids = [random.Random(2).randrange(512) for _ in range(60)]
        try:
            turn = await teacher.score_turn(ids, 40, ids[40:])
        finally:
            await teacher.aclose()
    assert turn.stats.path == ("generate" if scale_out else "completions")
    assert len(turn.ids_rows) == 20 and all(ids[40 + j] in row for j, row in enumerate(turn.ids_rows))
    assert all(len(row) in (5, 6) for row in turn.ids_rows)


async def test_the_in_process_teacher_checks_its_own_tokenizer(dev_model_dir, dev_tokenizer, tmp_path):
    """With `local_model_dir`, the tokenizer that matters is the one next to the local weights."""
    import shutil

    from hermes_opd.vllm_api.client import VLLMCompletionsClient
    from scoring.teacher import TeacherScorer, TeacherTokenizerMismatchError

    def scorer(model_dir) -> TeacherScorer:  # no request is made: the client is never used
        return TeacherScorer(
            VLLMCompletionsClient("http://127.0.0.1:9/v1", "m"),
            k=5,
            path="transformers",
            local_model_dir=str(model_dir),
        )

    await scorer(dev_model_dir).check_tokenizer(dev_tokenizer)  # the same files: accepted

    swapped = tmp_path / "swapped"
    shutil.copytree(dev_model_dir, swapped)
    spec = json.loads((swapped / "tokenizer.json").read_text())
    vocab = spec["model"]["vocab"]
    a, b = (
        dev_tokenizer.convert_ids_to_tokens(i)
        for i in dev_tokenizer.encode("def", add_special_tokens=False)[:1] * 2
    )
    other = next(t for t in vocab if t not in (a, "<|endoftext|>") and vocab[t] > 300)
    vocab[a], vocab[other] = vocab[other], vocab[a]  # two ids swapped: same size, other ids
    (swapped / "tokenizer.json").write_text(json.dumps(spec))
    with pytest.raises(TeacherTokenizerMismatchError, match="in-process teacher's directory"):
        await scorer(swapped).check_tokenizer(dev_tokenizer)

    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(dev_model_dir / "config.json", bare / "config.json")
    # transformers builds an empty tokenizer from a bare config.json: refused, by its vocabulary size
    with pytest.raises(TeacherTokenizerMismatchError, match="over a vocabulary of 1,"):
        await scorer(bare).check_tokenizer(dev_tokenizer)
