"""A client's `logprobs` / `top_logprobs` on Chat Completions (pure logic): how the request asks,
the entries built from vLLM's sampled ids (environments/proxy/token_logprobs.py), and the chunk
writer that sends each entry once, on the next chunk after its tokens arrived."""

from __future__ import annotations

import json

import pytest

from environments.proxy.chat_completions.request import parse_request
from environments.proxy.chat_completions.response import ChunkWriter, completion_body
from environments.proxy.conversation import AssistantTurn, WireError
from environments.proxy.token_logprobs import logprob_entries

MESSAGES = [{"role": "user", "content": "hi"}]


def asked(**fields) -> int | None:
    conversation, _ = parse_request({"model": "m", "messages": MESSAGES, **fields})
    return conversation.logprobs


def test_the_request_says_how_many_alternatives_or_none():
    assert asked() is None
    assert asked(logprobs=False) is None
    assert asked(logprobs=False, top_logprobs=0) is None
    assert asked(logprobs=True) == 0
    assert asked(logprobs=True, top_logprobs=5) == 5
    assert asked(logprobs=True, top_logprobs=20) == 20


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"logprobs": "yes"}, "logprobs"),
        ({"logprobs": 1}, "logprobs"),
        ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        ({"logprobs": True, "top_logprobs": -1}, "top_logprobs"),
        ({"logprobs": True, "top_logprobs": 2.0}, "top_logprobs"),
        ({"logprobs": True, "top_logprobs": True}, "top_logprobs"),
        ({"top_logprobs": 3}, "top_logprobs"),  # alternatives without the logprobs
    ],
)
def test_what_cannot_be_read_is_one_400_naming_it(fields, param):
    with pytest.raises(WireError) as caught:
        asked(**fields)
    assert caught.value.param == param and caught.value.status == 400


def test_entries_are_each_ids_text_bytes_and_alternatives(dev_tokenizer):
    ids = dev_tokenizer("Hello there", add_special_tokens=False)["input_ids"][:2]
    entries = logprob_entries(
        dev_tokenizer, ids, [-0.5, float("-inf")], [[ids[0], 7], [9, ids[1]]], [[-0.5, -1.0], [-0.1, -9.0]]
    )
    first, second = entries
    assert first["token"] == dev_tokenizer.decode([ids[0]]) and first["logprob"] == -0.5
    assert first["bytes"] == list(first["token"].encode("utf-8"))
    assert [t["token"] for t in first["top_logprobs"]] == [
        dev_tokenizer.decode([ids[0]]),
        dev_tokenizer.decode([7]),
    ]
    assert second["logprob"] == -9999.0  # JSON has no -inf; vLLM writes the same bound
    assert [t["logprob"] for t in second["top_logprobs"]] == [-0.1, -9.0]
    assert logprob_entries(dev_tokenizer, ids, [-0.5, -0.25], [], [])[1]["top_logprobs"] == []
    with pytest.raises(ValueError):
        logprob_entries(dev_tokenizer, ids, [-0.5], [], [])


def chunks(data: bytes) -> list[dict]:
    return [json.loads(line[6:]) for line in data.decode().split("\n\n") if line.startswith("data: {")]


TURN = AssistantTurn(
    content="ab", reasoning=None, tool_calls=[], finish_reason="stop", prompt_tokens=3, completion_tokens=3
)


def entry(token: str) -> dict:
    return {"token": token, "logprob": -1.0, "bytes": list(token.encode()), "top_logprobs": []}


def test_each_entry_goes_out_once_on_the_next_chunk():
    writer = ChunkWriter("c", "m", logprobs=True)
    sent = chunks(writer.role())
    writer.add_logprobs([entry("a")])
    sent += chunks(writer.content("a"))
    writer.add_logprobs([entry("b")])  # held back text: no chunk yet
    writer.add_logprobs([entry("<eos>")])
    sent += chunks(writer.content("b"))
    sent += chunks(writer.end(TURN, include_usage=True))
    contents = [c["choices"][0]["logprobs"]["content"] for c in sent if c["choices"]]
    assert [[e["token"] for e in c] for c in contents] == [[], ["a"], ["b", "<eos>"], []]
    plain = ChunkWriter("c", "m")
    plain.add_logprobs([entry("a")])
    assert chunks(plain.content("a"))[0]["choices"][0]["logprobs"] is None  # not asked, not sent


def test_a_whole_answer_carries_every_entry_only_when_asked():
    body = completion_body("c", "m", TURN, [entry("a"), entry("b")])
    assert [e["token"] for e in body["choices"][0]["logprobs"]["content"]] == ["a", "b"]
    assert completion_body("c", "m", TURN)["choices"][0]["logprobs"] is None
