"""Parsing of vLLM response bodies, including shapes a real server won't produce on demand."""

from __future__ import annotations

import json

import pytest
from aiohttp import web

from hermes_opd.vllm_api.client import RetryPolicy, VLLMCompletionsClient
from hermes_opd.vllm_api.errors import TransientServerError, UnexpectedResponseError
from hermes_opd.vllm_api.wire_format import parse_generated
from scoring.request_paths import completions_prompt_topk
from scoring.response_parsing import parse_prompt_topk


def entry(*items):
    return {str(tok): {"logprob": lp, "rank": rank, "decoded_token": "x"} for tok, lp, rank in items}


def test_prompt_topk_orders_by_rank_and_appends_actual_token():
    # The actual token (9) comes first in vLLM's dict, ranked below K=2.
    body = {"choices": [{"prompt_logprobs": [None, entry((9, -5.0, 7), (4, -0.1, 1), (3, -2.5, 2))]}]}
    parsed = parse_prompt_topk(body, [1, 9], k=2)
    assert parsed.token_ids == [[], [4, 3, 9]]
    assert parsed.logprobs == [[], [-0.1, -2.5, -5.0]]


def test_prompt_topk_actual_token_inside_topk_is_not_duplicated():
    body = {"choices": [{"prompt_logprobs": [None, entry((3, -2.5, 2), (4, -0.1, 1))]}]}
    parsed = parse_prompt_topk(body, [1, 3], k=2)
    assert parsed.token_ids == [[], [4, 3]]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"choices": [{}]}, "no choices\\[0\\].prompt_logprobs"),
        ({"choices": [{"prompt_logprobs": [None]}]}, "1 positions for a prompt of 2 tokens"),
        ({"choices": [{"prompt_logprobs": [None, None]}]}, "entry 1 is null"),
        ({"choices": [{"prompt_logprobs": [None, [1, 2]]}]}, "entry 1 is list"),
        ({"choices": [{"prompt_logprobs": [None, {"4": {"rank": 1}}]}]}, "entry 1 is malformed"),
        ({"choices": [{"prompt_logprobs": [None, entry((4, float("nan"), 1))]}]}, "invalid logprob nan"),
        ({"choices": [{"prompt_logprobs": [None, entry((4, -0.1, 1))]}]}, "lacks the actual token 3"),
    ],
)
def test_prompt_topk_rejects_bad_shapes(body, message):
    with pytest.raises(UnexpectedResponseError, match=message):
        parse_prompt_topk(body, [1, 3], k=1)


def test_generated_parsing_and_errors():
    body = {
        "choices": [
            {
                "index": 0,
                "token_ids": [5, 2],
                "logprobs": {"token_logprobs": [-0.5, -0.1]},
                "finish_reason": "stop",
                "text": "a",
            }
        ]
    }
    (seq,) = parse_generated(body, expected_n=1)
    assert seq.token_ids == [5, 2] and seq.logprobs == [-0.5, -0.1] and seq.finish_reason == "stop"
    with pytest.raises(UnexpectedResponseError, match="asked for n=2"):
        parse_generated(body, expected_n=2)
    with pytest.raises(UnexpectedResponseError, match="return_token_ids"):
        parse_generated({"choices": [{"text": "a"}]}, expected_n=1)
    bad = json.loads(json.dumps(body))
    bad["choices"][0]["logprobs"]["token_logprobs"] = [-0.5]
    with pytest.raises(UnexpectedResponseError, match="2 token ids but 1 logprobs"):
        parse_generated(bad, expected_n=1)


def test_generated_without_logprobs_asked_for_leaves_them_empty():
    body = {
        "choices": [{"index": 0, "token_ids": [5, 2], "logprobs": None, "finish_reason": "stop", "text": "a"}]
    }
    (seq,) = parse_generated(body, expected_n=1, sampled_logprobs=False)
    assert seq.token_ids == [5, 2] and seq.logprobs == []
    with pytest.raises(UnexpectedResponseError, match="lacks token_ids/logprobs"):
        parse_generated(body, expected_n=1)  # asked for: their absence is an error


@pytest.fixture
async def fake_vllm(aiohttp_unused_port=None):
    """A fake server for faults only: a 200 with a body of the wrong shape, a 500, non-JSON."""
    state = {"calls": 0, "mode": "shape"}

    async def completions(request):
        state["calls"] += 1
        if state["mode"] == "shape":
            return web.json_response({"choices": [{"unexpected": True}]})
        if state["mode"] == "500-then-ok" and state["calls"] == 1:
            return web.Response(status=500, text="engine crashed")
        if state["mode"] == "always-500":
            return web.Response(status=500, text="engine crashed")
        if state["mode"] == "not-json":
            return web.Response(status=200, text="<html>proxy</html>")
        ids = (await request.json())["prompt"]
        return web.json_response(
            {"choices": [{"prompt_logprobs": [None] + [entry((t, -0.5, 1)) for t in ids[1:]]}]}
        )

    app = web.Application()
    app.router.add_post("/v1/completions", completions)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}/v1", state
    await runner.cleanup()


async def test_client_reports_unexpected_shape(fake_vllm):
    url, _ = fake_vllm
    client = VLLMCompletionsClient(url, "m")
    with pytest.raises(UnexpectedResponseError, match="prompt_logprobs"):
        await completions_prompt_topk(client, [1, 2, 3], 5)
    await client.close()


async def test_client_retries_transient_500_then_succeeds(fake_vllm):
    url, state = fake_vllm
    state["mode"] = "500-then-ok"
    client = VLLMCompletionsClient(url, "m", retry=RetryPolicy(max_attempts=3, base_delay_s=0.01))
    result = (await completions_prompt_topk(client, [1, 2, 3], 1)).topk
    assert state["calls"] == 2 and result.token_ids == [[], [2], [3]]
    await client.close()


async def test_client_gives_up_after_max_attempts(fake_vllm):
    url, state = fake_vllm
    state["mode"] = "always-500"
    client = VLLMCompletionsClient(url, "m", retry=RetryPolicy(max_attempts=3, base_delay_s=0.01))
    with pytest.raises(TransientServerError, match="answered 500: engine crashed"):
        await completions_prompt_topk(client, [1, 2, 3], 1)
    assert state["calls"] == 3
    await client.close()


async def test_client_reports_non_json_body(fake_vllm):
    url, state = fake_vllm
    state["mode"] = "not-json"
    client = VLLMCompletionsClient(url, "m")
    with pytest.raises(UnexpectedResponseError, match="not JSON"):
        await completions_prompt_topk(client, [1, 2, 3], 1)
    await client.close()
