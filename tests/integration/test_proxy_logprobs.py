"""A client's `logprobs` / `top_logprobs` on Chat Completions, against the real dev vLLM and the
official `openai` client: each sampled token's logprob and its most likely alternatives are vLLM's
own (the same request to vLLM's own chat route, same seed, gives the same entries), a stream carries
each entry once, in order, and a trained turn's sample keeps the very logprobs the client saw. The
alternatives are the most likely tokens, most likely first."""

from __future__ import annotations

import pytest
from openai import AsyncOpenAI

from tests.support.proxy_factory import capture_generations, first_messages, proxy_config, running_proxy

pytestmark = pytest.mark.integration


def entries(content) -> list[tuple[str, float, list[int], list[tuple[str, float]]]]:
    return [(e.token, e.logprob, e.bytes, [(t.token, t.logprob) for t in e.top_logprobs]) for e in content]


async def test_a_clients_logprobs_are_vllms_own_for_the_tokens_it_sampled(dev_server, tmp_path):
    params = {
        "messages": first_messages(),
        "max_tokens": 24,
        "temperature": 1.0,
        "seed": 11,
        "logprobs": True,
        "top_logprobs": 3,
    }
    direct = AsyncOpenAI(base_url=dev_server.base_url, api_key="x")
    expected = await direct.chat.completions.create(model=dev_server.model_name, **params)
    async with running_proxy(proxy_config(dev_server, tmp_path, samples_per_group=1)) as (url, server):
        generations = capture_generations(server)
        proxy = AsyncOpenAI(base_url=url, api_key="x")
        whole = await proxy.chat.completions.create(
            model="dev-model", **params, extra_headers={"X-Session-Id": "a"}
        )
        streamed = []
        async for chunk in await proxy.chat.completions.create(
            model="dev-model", stream=True, **params, extra_headers={"X-Session-Id": "b"}
        ):
            for choice in chunk.choices:
                streamed += entries(choice.logprobs.content)
        plain = await proxy.chat.completions.create(
            model="dev-model", **{**params, "logprobs": False, "top_logprobs": None}
        )
    got = entries(whole.choices[0].logprobs.content)
    assert whole.choices[0].message.content == expected.choices[0].message.content
    want = entries(expected.choices[0].logprobs.content)
    assert [e[0] for e in got] == [e[0] for e in want]  # the same tokens
    for ours, theirs in zip(got, want, strict=True):
        assert ours[1] == pytest.approx(theirs[1], abs=1e-5)
        assert ours[2] == theirs[2]
        # the 3 most likely, most likely first (OpenAI's meaning); vLLM's own route lists the sampled
        # token first, then the most likely others, so the two agree on every token both list
        top, their_top = dict(ours[3]), dict(theirs[3])
        assert len(ours[3]) == 3 and [lp for _, lp in ours[3]] == sorted(top.values(), reverse=True)
        assert all(top[t] == pytest.approx(lp, abs=1e-5) for t, lp in their_top.items() if t in top)
        assert max(top.values()) >= max(their_top.values()) - 1e-5
        if ours[0] in top:
            assert set(top) == set(their_top)
    assert streamed == got  # each entry once, in order, on the chunks
    # the trained sample holds the sampled ids' logprobs the client was given
    _prompt, ids, logprobs = generations[0]
    assert [e[1] for e in got] == logprobs and len(ids) == len(got)  # the EOS that ended it included
    assert plain.choices[0].logprobs is None  # not asked, not sent
