"""The teacher input around the hint is the tokenizer's own encoding; everything else is the
student's exact ids (dev tokenizer: byte-level BPE with the Qwen/GPT-4 pre-tokenizer)."""

from __future__ import annotations

import pytest

from hermes_opd.contract.provenance import TurnRecord, teacher_input_ids
from hermes_opd.devkit.dev_corpus import DEV_TOOLS
from hermes_opd.record.hint import hint_text
from hermes_opd.record.hint_splice import (
    NoHintAnchorError,
    boundary_token_ids,
    build_canonical_teacher_input,
    splice_text_at,
    tokenizer_codec,
)
from hermes_opd.record.splice_audit import audit_groups, check_splice
from hermes_opd.record.trajectory import TurnSpan
from hermes_opd.record.transcript_recorder import TranscriptRecorder

HINT = "Run the tests before answering."
CALL = '<tool_call>\n{"name": "terminal", "arguments": {"command": "ls"}}\n</tool_call>'


def v1_splice(traj, span, hint_ids: list[int]) -> tuple[list[int], int]:
    """Format version 1's splice, for comparison: the hint's own ids inserted at the anchor."""
    anchor = traj.hint_anchor(span)
    ids = traj.tokens[:anchor] + list(hint_ids) + traj.tokens[anchor : span.end]
    return ids, len(ids) - len(span)


def record(tokenizer, task: str):
    recorder = TranscriptRecorder(tokenizer, DEV_TOOLS)
    recorder.start([{"role": "system", "content": "Be brief."}, {"role": "user", "content": task}])
    gen = tokenizer.encode(CALL, add_special_tokens=False) + [tokenizer.eos_token_id]
    span = recorder.record_generation(
        gen, [-0.5] * len(gen), {"role": "assistant", "content": ""}, tokenizer.decode(gen[:-1])
    )
    recorder.extend([{"role": "tool", "name": "terminal", "content": "solution.py"}])
    return recorder.trajectory(), span


def pieces(tokenizer, ids):
    return [tokenizer.decode([i]) for i in ids]


def test_dev_tokenizer_merges_punctuation_with_newlines(dev_tokenizer):
    # The boundary effect production BPEs have: without it no test would see a non-canonical splice.
    assert pieces(dev_tokenizer, dev_tokenizer.encode("in solution.py.\n\n[user", add_special_tokens=False))[
        -3:
    ] == [
        ".\n\n",
        "[",
        "user",
    ]
    assert (
        pieces(dev_tokenizer, dev_tokenizer.encode("def f(x):\n    pass", add_special_tokens=False))[3]
        == "):\n"
    )


def test_hint_after_a_full_stop_is_re_encoded_canonically(dev_tokenizer):
    traj, span = record(dev_tokenizer, "Write `add(a, b)` in solution.py.")
    anchor = traj.hint_anchor(span)
    assert dev_tokenizer.decode(traj.tokens[anchor - 1 : anchor + 1]) == ".<|im_end|>"
    splice = build_canonical_teacher_input(traj, span, HINT, dev_tokenizer)
    # Only the '.' before the anchor is replaced: '.' + '\n\n' become the one token '.\n\n'.
    assert splice.hint_insert_at == anchor and splice.replaced == (anchor - 1, anchor)
    assert pieces(dev_tokenizer, splice.replacement_ids)[:3] == [".\n\n", "[", "user"]
    assert dev_tokenizer.decode(splice.replacement_ids) == "." + hint_text(HINT)
    # Exact everywhere else: the student's ids before the window, after it, and the turn itself.
    r0, r1 = splice.replaced
    assert splice.ids[:r0] == traj.tokens[:r0]
    assert splice.ids[r0 + len(splice.replacement_ids) :] == traj.tokens[r1 : span.end]
    assert splice.ids[splice.prompt_len :] == traj.tokens[span.start : span.end]
    assert splice.prompt_len == span.start - (r1 - r0) + len(splice.replacement_ids)
    # The whole boundary-delimited segment is what the tokenizer writes for its text.
    codec = tokenizer_codec(dev_tokenizer)
    window, canonical, window_ids, _ = check_splice(
        splice.ids, r0, len(splice.replacement_ids), splice.prompt_len, **codec
    )
    assert canonical and dev_tokenizer.decode(window_ids).startswith(
        "user\nWrite `add(a, b)` in solution.py.\n\n["
    )
    assert splice.ids[window[0] - 1] == dev_tokenizer.convert_tokens_to_ids("<|im_start|>")
    assert splice.ids[window[1]] == dev_tokenizer.eos_token_id
    # The version-1 splice (hint ids inserted as they are) is exactly what the tokenizer never writes.
    v1_ids_in, v1_prompt_len = v1_splice(
        traj, span, dev_tokenizer.encode(hint_text(HINT), add_special_tokens=False)
    )
    hint_len = len(v1_ids_in) - span.end  # ids = tokens[:anchor] + hint + tokens[anchor:end]
    _, v1_canonical, v1_ids, v1_reencoded = check_splice(v1_ids_in, anchor, hint_len, v1_prompt_len, **codec)
    assert not v1_canonical
    assert ".\n\n" in pieces(dev_tokenizer, v1_reencoded) and ".\n\n" not in pieces(dev_tokenizer, v1_ids)


def test_no_merge_means_the_plain_splice(dev_tokenizer):
    traj, span = record(dev_tokenizer, "Write add")
    splice = build_canonical_teacher_input(traj, span, HINT, dev_tokenizer)
    anchor = traj.hint_anchor(span)
    assert splice.replaced == (anchor, anchor), "nothing to re-encode when nothing merges"
    hint_ids = dev_tokenizer.encode(hint_text(HINT), add_special_tokens=False)
    v1_ids, _ = v1_splice(traj, span, hint_ids)
    assert splice.ids == v1_ids and splice.replacement_ids == hint_ids


def test_text_after_the_anchor_up_to_the_boundary_is_part_of_the_window(dev_tokenizer):
    # A template that writes text between the content and the end-of-message token.
    start_id = dev_tokenizer.convert_tokens_to_ids("<|im_start|>")
    eos = dev_tokenizer.eos_token_id
    head = dev_tokenizer.encode("user\nFix it.", add_special_tokens=False)
    tail = dev_tokenizer.encode("\n(end)", add_special_tokens=False)
    turn_ids = dev_tokenizer.encode("Done.", add_special_tokens=False)
    prefix = (
        [start_id]
        + head
        + tail
        + [eos, start_id]
        + dev_tokenizer.encode("assistant\n", add_special_tokens=False)
    )
    tokens = prefix + turn_ids
    anchor = 1 + len(head)
    span = TurnSpan(len(prefix), len(tokens), 2)
    splice = splice_text_at(tokens, anchor, span, hint_text(HINT), **tokenizer_codec(dev_tokenizer))
    segment_text = "user\nFix it." + hint_text(HINT) + "\n(end)"
    r0, r1 = splice.replaced
    assert splice.segment == (1, 1 + len(head) + len(tail))
    assert splice.ids[
        1 : r0 + len(splice.replacement_ids) + (splice.segment[1] - r1)
    ] == dev_tokenizer.encode(segment_text, add_special_tokens=False)
    assert splice.ids[splice.prompt_len :] == turn_ids
    with pytest.raises(ValueError, match="not within"):
        splice_text_at(tokens, span.start + 1, span, "x", **tokenizer_codec(dev_tokenizer))


def test_rebuilt_from_provenance_and_audited(dev_tokenizer):
    traj, span = record(dev_tokenizer, "Write `add(a, b)` in solution.py.")
    splice = build_canonical_teacher_input(traj, span, HINT, dev_tokenizer)
    turn = {
        "span": [span.start, span.end],
        "message_index": span.message_index,
        "status": "scored",
        "next_state_role": "tool",
        "hint": HINT,
        "votes": {"n": 1},
        "hint_insert_at": splice.hint_insert_at,
        "replaced_range": list(splice.replaced),
        "replacement_ids": splice.replacement_ids,
        "teacher_prompt_len": splice.prompt_len,
    }
    record_ = TurnRecord(
        span=(span.start, span.end),
        status="scored",
        hint=HINT,
        replaced_range=splice.replaced,
        replacement_ids=splice.replacement_ids,
        hint_insert_at=splice.hint_insert_at,
    )
    assert teacher_input_ids(traj.tokens, record_) == splice.ids
    group = {
        "tokens": [traj.tokens],
        "overrides": [
            {
                "opd": {
                    "format_version": 2,
                    "mode": "topk",
                    "k": 5,
                    "turn_spans": [[span.start, span.end]],
                    "turns": [turn],
                }
            }
        ],
    }
    codec = tokenizer_codec(dev_tokenizer)
    assert [c.canonical for c in audit_groups([group], **codec)] == [True]
    assert [c.canonical for c in audit_groups([group], as_v1=True, **codec)] == [False]


def test_missing_anchor_and_boundaries(dev_tokenizer):
    traj, span = record(dev_tokenizer, "Write add.")
    traj.content_ends = {}
    with pytest.raises(NoHintAnchorError, match="no hint anchor"):
        build_canonical_teacher_input(traj, span, HINT, dev_tokenizer)
    stops = boundary_token_ids(dev_tokenizer)
    for token in ("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<tool_call>", "</think>"):
        assert dev_tokenizer.convert_tokens_to_ids(token) in stops
