"""The turn's rows read from the end of a vLLM body (`_tail_prompt_topk`) are exactly the rows of the
whole-body parse, on both routes, for bodies whose decoded tokens try to look like the structure."""

from __future__ import annotations

import json
import random

import pytest

from hermes_opd.vllm_api.errors import UnexpectedResponseError
from scoring import response_parsing
from scoring.response_parsing import parse_prompt_topk, parse_prompt_topk_json

# Decoded token strings that contain the byte patterns the tail reader looks for.
NASTY = ['}},{"', '}},{"7', "}}]", '}}],"', '"prompt_tokens":3', '"prompt_logprobs":[', "\\", '"', "\n", "x"]


def _entry(rng: random.Random, actual: int, k: int, vocab: int) -> dict[str, dict]:
    top = rng.sample(range(vocab), k)
    lps = sorted((-rng.random() * 8 for _ in range(k)), reverse=True)
    entry = {}
    if actual not in top:  # vLLM: the actual token first, ranked below the top K
        entry[str(actual)] = {
            "logprob": lps[-1] - 1.0,
            "rank": k + 1 + rng.randrange(50),
            "decoded_token": rng.choice(NASTY),
        }
    for rank, (tok, lp) in enumerate(zip(top, lps, strict=True), start=1):
        entry[str(tok)] = {"logprob": lp, "rank": rank, "decoded_token": rng.choice(NASTY)}
    return entry


def vllm_body(entries: list, route: str, prompt_tokens: int, text: str = " x") -> bytes:
    """A body laid out as vLLM 0.32 writes it (starlette: compact separators, this key order)."""
    usage = {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + 1, "completion_tokens": 1}
    if route == "completions":
        body = {
            "id": "cmpl-1",
            "object": "text_completion",
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "text": text,
                    "logprobs": None,
                    "finish_reason": "length",
                    "stop_reason": None,
                    "token_ids": None,
                    "prompt_logprobs": entries,
                    "prompt_token_ids": None,
                }
            ],
            "usage": usage,
            "kv_transfer_params": None,
        }
    else:
        body = {
            "request_id": "r",
            "model": "m",
            "created": 1,
            "usage": usage,
            "prompt_logprobs": entries,
            "prompt_token_id_logprobs": None,
            "prompt_token_ids": None,
            "output_mode": "tokens",
            "choices": [{"index": 0, "logprobs": None, "finish_reason": "length", "token_ids": [5]}],
        }
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def _case(rng: random.Random, route: str):
    n = rng.randrange(3, 40)
    k = rng.randrange(1, 8)
    ids = [rng.randrange(60) for _ in range(n)]
    entries = [None] + [_entry(rng, a, k, 60) for a in ids[1:]]
    return ids, k, entries, vllm_body(entries, route, n, text=rng.choice(NASTY))


@pytest.mark.parametrize("route", ["completions", "generate"])
def test_tail_rows_equal_the_whole_body_rows(route):
    rng = random.Random(7 if route == "completions" else 8)
    for _ in range(400):
        ids, k, entries, raw = _case(rng, route)
        from_pos = rng.randrange(2, len(ids))
        plain = parse_prompt_topk(json.loads(raw), ids, k, from_pos=from_pos, route=route)
        tail = response_parsing._tail_prompt_topk(raw, ids, k, from_pos, route)  # never falls back here
        assert tail == plain
        assert parse_prompt_topk_json(raw, ids, k, from_pos=from_pos, route=route) == plain


def test_what_the_tail_cannot_vouch_for_goes_to_the_whole_body_parse():
    rng = random.Random(3)
    ids, k, entries, raw = _case(rng, "completions")
    from_pos = 2
    tail = response_parsing._tail_prompt_topk
    cases = {
        "usage disagrees with the prompt": raw.replace(
            f'"prompt_tokens":{len(ids)}'.encode(), f'"prompt_tokens":{len(ids) + 1}'.encode()
        ),
        "no usage": vllm_body(entries, "completions", len(ids)).replace(b'"prompt_tokens"', b'"p"'),
        "spaces after separators": json.dumps(json.loads(raw)).encode(),
        "from_pos 1": raw,
    }
    for name, body in cases.items():
        with pytest.raises(response_parsing._SlowPath):
            tail(body, ids, k, 1 if name == "from_pos 1" else from_pos, "completions")
    # and the public parser still answers, exactly as the plain path does
    spaced = cases["spaces after separators"]
    assert parse_prompt_topk_json(spaced, ids, k, from_pos=from_pos) == parse_prompt_topk(
        json.loads(spaced), ids, k, from_pos=from_pos
    )


def test_a_body_for_another_prompt_is_refused_not_misread():
    rng = random.Random(5)
    ids, k, entries, raw = _case(rng, "completions")
    other = [(t + 1) % 60 for t in ids]  # same length, other tokens: the actual-token check fails
    with pytest.raises(UnexpectedResponseError, match="lacks the actual token"):
        parse_prompt_topk_json(raw, other, k, from_pos=2)
    longer = ids + [1]
    with pytest.raises(UnexpectedResponseError, match="positions for a prompt of"):
        parse_prompt_topk_json(raw, longer, k, from_pos=2)


def test_the_event_loop_reads_the_tail_and_a_thread_decides_the_rest():
    """`parse_turn_rows_from_tail` (run on the loop) answers only what the tail vouches for; the
    request path sends the rest through the client's whole-body decode, with the same rows."""
    import asyncio

    from hermes_opd.vllm_api.client import VLLMCompletionsClient
    from scoring.request_paths import completions_prompt_topk
    from scoring.response_parsing import parse_turn_rows_from_tail

    ids, k, entries, raw = _case(random.Random(3), "completions")
    spaced = json.dumps(json.loads(raw)).encode()
    plain = parse_prompt_topk(json.loads(raw), ids, k, from_pos=2)
    assert parse_turn_rows_from_tail(raw, ids, k, from_pos=2) == plain
    assert parse_turn_rows_from_tail(spaced, ids, k, from_pos=2) is None

    class Client(VLLMCompletionsClient):
        async def post(self, path, payload, decode=None, *, root=False, decode_on_loop=False):
            assert decode_on_loop
            return self._decode(self.body, decode)

    for body in (raw, spaced, b"not json"):
        client = Client("http://127.0.0.1:1/v1", "m")
        client.body = body
        if body == b"not json":
            with pytest.raises(UnexpectedResponseError, match="not JSON"):
                asyncio.run(completions_prompt_topk(client, ids, k, from_pos=2))
            continue
        read = asyncio.run(completions_prompt_topk(client, ids, k, from_pos=2))
        assert read.topk == plain and read.body_bytes == len(body)
