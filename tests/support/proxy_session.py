"""Requests and answered turns for the proxy session tests."""

from __future__ import annotations

from hermes_opd.vllm_api.wire_format import GeneratedSequence


def body(**extra):
    return {"model": "m", "messages": [{"role": "user", "content": "hi"}], **extra}


def generated(tokenizer, text):
    """What vLLM would return for `text`: its ids plus EOS, with made-up logprobs."""
    ids = tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    return GeneratedSequence(ids, [-0.5 - i / 100 for i in range(len(ids))], "stop", text)


def answer(state, tokenizer, messages, text, version=0, tools=None, record=True, reply=None, message=None):
    """Plan, generate `text`, commit: (plan, generated, reply as the client re-sends it, committed)."""
    plan = state.plan(messages, tools)
    g = generated(tokenizer, text)
    reply = reply or {"role": "assistant", "content": text}
    message = message or {"role": "assistant", "content": text}
    done = state.commit(plan, g, message, text, reply, ("m", version), record=record)
    return plan, g, reply, done
