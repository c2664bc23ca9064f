"""hermes_opd/vllm_api/client.py, `parse_stream_chunk`: one `data:` payload of vLLM's completion
stream -> the ids it sampled and their logprobs; what does not add up is refused, never guessed."""

from __future__ import annotations

import json

import pytest

from hermes_opd.vllm_api.client import StreamedTokens, parse_stream_chunk
from hermes_opd.vllm_api.errors import TransientServerError, UnexpectedResponseError


def chunk(**choice) -> bytes:
    return json.dumps(
        {"id": "cmpl-1", "object": "text_completion", "choices": [{"index": 0, **choice}]}
    ).encode()


def test_ids_and_their_logprobs_come_as_vllm_sent_them():
    data = chunk(
        text="ab", token_ids=[5, 6], logprobs={"token_logprobs": [-0.5, -1.25], "tokens": ["a", "b"]}
    )
    assert parse_stream_chunk(data, "u", True) == StreamedTokens([5, 6], [-0.5, -1.25], None)
    assert parse_stream_chunk(data, "u", False) == StreamedTokens([5, 6], [], None)
    end = chunk(text="", token_ids=[], finish_reason="length")
    assert parse_stream_chunk(end, "u", True) == StreamedTokens([], [], "length")


def test_top_logprobs_are_the_most_likely_ids_most_likely_first():
    """Asked as token ids; vLLM adds the sampled id when it is not among the top ones."""
    top = [
        {"token_id:9": -2.5, "token_id:5": -0.5, "token_id:4": -1.0},
        {"token_id:6": -0.25, "token_id:3": -3.0},
    ]
    data = chunk(text="ab", token_ids=[5, 6], logprobs={"token_logprobs": [-0.5, -0.25], "top_logprobs": top})
    parsed = parse_stream_chunk(data, "u", True, 2)
    assert parsed.top_ids == [[5, 4], [6, 3]] and parsed.top_logprobs == [[-0.5, -1.0], [-0.25, -3.0]]
    assert parse_stream_chunk(data, "u", True).top_ids == []  # not asked, not read


@pytest.mark.parametrize(
    "top",
    [
        None,  # asked for, not sent
        [{"token_id:5": -0.5}],  # one row for two ids
        [{"a": -0.5}, {"token_id:6": -0.25}],  # a token, not an id
        [{"token_id:x": -0.5}, {"token_id:6": -0.25}],
        [["token_id:5"], {"token_id:6": -0.25}],
    ],
)
def test_top_logprobs_that_do_not_add_up_are_refused(top):
    data = chunk(text="ab", token_ids=[5, 6], logprobs={"token_logprobs": [-0.5, -0.25], "top_logprobs": top})
    with pytest.raises(UnexpectedResponseError):
        parse_stream_chunk(data, "u", True, 2)


def test_the_stop_string_that_ended_the_answer_is_kept():
    """vLLM's `stop_reason`: the stop string, or a stop token's id (not a client's stop sequence)."""
    stopped = chunk(text="", token_ids=[7], finish_reason="stop", stop_reason="END")
    assert parse_stream_chunk(stopped, "u", False) == StreamedTokens([7], [], "stop", "END")
    by_token = chunk(text="", token_ids=[7], finish_reason="stop", stop_reason=151645)
    assert parse_stream_chunk(by_token, "u", False) == StreamedTokens([7], [], "stop", None)


def test_chunks_that_carry_nothing_are_skipped():
    assert (
        parse_stream_chunk(json.dumps({"choices": [], "usage": {"completion_tokens": 3}}).encode(), "u", True)
        is None
    )
    assert parse_stream_chunk(chunk(text="", token_ids=[]), "u", True) is None


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (b"{not json", UnexpectedResponseError),
        (b"[1]", UnexpectedResponseError),
        (chunk(text="ab"), UnexpectedResponseError),  # no token_ids: a vLLM without return_token_ids
        (chunk(text="ab", token_ids=[5, 6], logprobs={"token_logprobs": [-0.5]}), UnexpectedResponseError),
        (json.dumps({"error": {"message": "engine died"}}).encode(), TransientServerError),
    ],
)
def test_what_does_not_add_up_is_refused(data, error):
    with pytest.raises(error):
        parse_stream_chunk(data, "u", True)
