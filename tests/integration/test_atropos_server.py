"""CurrentVLLMServer against the real dev vLLM server, checked against transformers."""

from __future__ import annotations

import math

import pytest
from atroposlib.envs.server_handling.managed_server import ManagedServer
from atroposlib.envs.server_handling.server_baseline import APIServerConfig

from environments.atropos.server import CurrentVLLMServer
from hermes_opd.runtime.server_process import free_port
from hermes_opd.vllm_api.errors import MaxLogprobsTooLowError, ModelNotServedError, ServerUnreachableError
from tests.support.env_factory import close_after_test, close_server
from tests.support.oracle import full_logprobs, token_logprobs

pytestmark = pytest.mark.integration


def make_server(dev_server, model_name=None, **overrides) -> CurrentVLLMServer:
    config = APIServerConfig(
        base_url=dev_server.base_url,
        model_name=model_name or dev_server.model_name,
        tokenizer_name=str(dev_server.model_dir),
        api_key="EMPTY",
        timeout=120,
        **overrides,
    )
    server = CurrentVLLMServer(config)
    close_after_test(lambda: close_server(server))
    return server


def sample_ids(tokenizer, n_tokens: int) -> list[int]:
    text = (
        "def merge_intervals(intervals):\n    result = []\n    for start, end in sorted(intervals):\n"
        "        if result and start <= result[-1][1]:\n            result[-1][1] = max(result[-1][1], end)\n"
        "        else:\n            result.append([start, end])\n    return result\n"
    )
    ids: list[int] = []
    while len(ids) < n_tokens:
        ids.extend(tokenizer.encode(text, add_special_tokens=False))
    return ids[:n_tokens]


async def test_get_logprobs_top50_matches_transformers(dev_server, dev_tokenizer, reference_model):
    server = make_server(dev_server)
    ids = sample_ids(dev_tokenizer, 300)
    result = await server.get_logprobs(input_ids=ids, top_k=50)
    assert result["prompt_tokens"] == ids
    assert len(result["prompt_topk_token_ids"]) == len(ids) == len(result["prompt_topk_logprobs"])
    assert result["prompt_topk_token_ids"][0] == []
    oracle = full_logprobs(reference_model, ids)
    outside_top50 = 0
    for pos in range(1, len(ids)):
        row_ids = result["prompt_topk_token_ids"][pos]
        row_lps = result["prompt_topk_logprobs"][pos]
        expected_top = oracle[pos].topk(50)
        assert set(row_ids[:50]) == set(expected_top.indices.tolist()), f"top-50 set differs at {pos}"
        assert row_lps[:50] == sorted(row_lps[:50], reverse=True)
        for tok, lp in zip(row_ids, row_lps, strict=True):
            assert abs(lp - float(oracle[pos, tok])) <= 1e-4, (pos, tok, lp, float(oracle[pos, tok]))
        if ids[pos] not in row_ids[:50]:
            outside_top50 += 1
            assert len(row_ids) == 51 and row_ids[50] == ids[pos]
        else:
            assert len(row_ids) == 50
    # The check above must have exercised the "actual token outside the top-50" path.
    assert outside_top50 > 0


async def test_managed_server_two_turn_chat_records_exact_tokens(dev_server, dev_tokenizer, reference_model):
    server = make_server(dev_server)
    managed = ManagedServer(server, tokenizer=dev_tokenizer)
    messages = [{"role": "user", "content": "Write `add(a, b)` in solution.py that returns the sum."}]
    first = await managed.chat_completion(messages=messages, max_tokens=24, temperature=1.0, n=1, seed=3)
    messages += [
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": "Now run it."},
    ]
    await managed.chat_completion(messages=messages, max_tokens=24, temperature=1.0, n=1, seed=4)
    nodes = managed.get_state()["nodes"]
    assert len(nodes) == 1, "the second turn must extend the first sequence"
    node = nodes[0]
    generated = [i for i, m in enumerate(node.masked_tokens) if m != -100]
    assert len(generated) >= 2
    assert all(node.masked_tokens[i] == node.tokens[i] for i in generated)
    oracle = token_logprobs(reference_model, node.tokens)
    for pos in generated:
        assert abs(node.logprobs[pos] - oracle[pos]) <= 1e-4, (pos, node.logprobs[pos], oracle[pos])
    # Both turns contributed generated tokens, separated by masked template glue.
    gaps = [b - a for a, b in zip(generated, generated[1:], strict=False) if b - a > 1]
    assert gaps, "expected two generated spans"


async def test_tokens_and_logprobs_n_greater_than_one(dev_server, dev_tokenizer, reference_model):
    server = make_server(dev_server)
    prompt = dev_tokenizer.apply_chat_template(
        [{"role": "user", "content": "hello"}], add_generation_prompt=True, tokenize=False
    )
    prompt_ids = dev_tokenizer.encode(prompt, add_special_tokens=False)
    prompt_tokens, outputs, logprobs, finish = await server.tokens_and_logprobs_completion(
        input_ids=prompt_ids, n=3, max_tokens=16, temperature=1.0
    )
    assert prompt_tokens == prompt_ids
    assert len(outputs) == len(logprobs) == len(finish) == 3
    for out, lps in zip(outputs, logprobs, strict=True):
        assert len(out) == len(lps) > 0
        oracle = token_logprobs(reference_model, prompt_ids + out)
        for j, lp in enumerate(lps):
            assert abs(lp - oracle[len(prompt_ids) + j]) <= 1e-4


async def test_too_few_max_logprobs_names_the_flag(dev_server):
    server = make_server(dev_server)
    with pytest.raises(MaxLogprobsTooLowError, match=r"--max-logprobs 151"):
        await server.get_logprobs(input_ids=[1, 2, 3, 4], top_k=150)


async def test_unknown_model_lists_served_models(dev_server):
    server = make_server(dev_server, model_name="no-such-model")
    with pytest.raises(ModelNotServedError, match=r"does not serve model 'no-such-model'.*dev-model"):
        await server.get_logprobs(input_ids=[1, 2, 3], top_k=5)


async def test_unreachable_server_fails_fast_with_url():
    port = free_port()
    config = APIServerConfig(
        base_url=f"http://127.0.0.1:{port}/v1", model_name="m", api_key="EMPTY", timeout=5
    )
    server = CurrentVLLMServer(config)
    close_after_test(lambda: close_server(server))
    server.health_wait_s = 2.0
    with pytest.raises(
        ServerUnreachableError, match=rf"127\.0\.0\.1:{port}.*(not healthy|is the server running)"
    ):
        await server.get_logprobs(input_ids=[1, 2, 3], top_k=5)


async def test_unreachable_without_health_check_names_url():
    port = free_port()
    config = APIServerConfig(
        base_url=f"http://127.0.0.1:{port}/v1", model_name="m", api_key="EMPTY", timeout=5, health_check=False
    )
    server = CurrentVLLMServer(config)
    close_after_test(lambda: close_server(server))
    server.client.retry = type(server.client.retry)(max_attempts=2, base_delay_s=0.01)
    with pytest.raises(
        ServerUnreachableError, match=rf"cannot connect to vLLM at http://127\.0\.0\.1:{port}"
    ):
        await server.tokens_and_logprobs_completion(input_ids=[1, 2, 3], max_tokens=2)


def test_logprob_values_are_finite_in_oracle(reference_model):
    lps = token_logprobs(reference_model, [5, 6, 7, 8])
    assert math.isnan(lps[0]) and all(math.isfinite(x) for x in lps[1:])
