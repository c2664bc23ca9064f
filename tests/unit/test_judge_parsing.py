"""Parsing of judge answers, including adversarial ones."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from judge.parsing import HINT_END, HINT_START, last_boxed_score, last_hint, parse_vote, strip_thinking

GOOD_HINT = "Run the test suite before claiming the bug is fixed."


def answer(body: str) -> str:
    return body.replace("<H>", HINT_START).replace("</H>", HINT_END)


def test_plain_positive_with_hint():
    vote = parse_vote(answer(f"The error shows it. \\boxed{{1}}\n<H>{GOOD_HINT}</H>"))
    assert vote.score == 1
    assert vote.hint == GOOD_HINT
    assert vote.parsed and not vote.failed


def test_plain_negative():
    vote = parse_vote("The tool simply succeeded.\n\\boxed{-1}")
    assert vote.score == -1
    assert vote.hint is None


def test_last_box_wins():
    assert parse_vote("First \\boxed{1}, on reflection \\boxed{-1}").score == -1
    assert parse_vote("First \\boxed{-1}, on reflection \\boxed{1}").score == 1


@pytest.mark.parametrize("value", ["0", "2", "yes", "1.0", "", "-2", "true"])
def test_non_unit_boxes_are_ignored(value):
    assert parse_vote(f"\\boxed{{{value}}}").score is None


def test_last_box_invalid_does_not_fall_back_to_an_earlier_valid_one():
    vote = parse_vote(answer(f"\\boxed{{1}} <H>{GOOD_HINT}</H> actually \\boxed{{0}}"))
    assert vote.score is None
    assert vote.hint == GOOD_HINT  # the hint is parsed on its own; the vote still does not count


@pytest.mark.parametrize("text", ["\\boxed{ 1 }", "\\boxed{+1}", "\\boxed {1}", "$\\boxed{1}$"])
def test_positive_spellings(text):
    assert parse_vote(text).score == 1


def test_unicode_minus_counts_as_minus_one():
    assert parse_vote("\\boxed{\u22121}").score == -1


def test_missing_box_is_unparsed_even_with_hint():
    vote = parse_vote(answer(f"I think 1. <H>{GOOD_HINT}</H>"))
    assert vote.score is None
    assert not vote.parsed


def test_unclosed_hint_gives_no_hint():
    vote = parse_vote(f"\\boxed{{1}}\n{HINT_START}{GOOD_HINT} and then the output stops")
    assert vote.score == 1
    assert vote.hint is None


def test_complete_hint_before_an_unclosed_one_is_kept():
    vote = parse_vote(answer(f"<H>{GOOD_HINT}</H> \\boxed{{1}} {HINT_START}second try cut off"))
    assert vote.hint == GOOD_HINT


def test_hint_before_box_counts():
    vote = parse_vote(answer(f"<H>{GOOD_HINT}</H>\nSo: \\boxed{{1}}"))
    assert vote.score == 1
    assert vote.hint == GOOD_HINT


def test_last_complete_hint_block_wins():
    vote = parse_vote(
        answer("<H>Check the file path first.</H> \\boxed{1} <H>Pass --force to the installer.</H>")
    )
    assert vote.hint == "Pass --force to the installer."


def test_nested_start_marker_takes_the_innermost_block():
    vote = parse_vote(answer("\\boxed{1} <H>draft <H>Quote the glob pattern in the find command.</H>"))
    assert vote.hint == "Quote the glob pattern in the find command."


def test_think_block_with_fake_box_and_hint_is_ignored():
    text = answer(f"<think>Maybe \\boxed{{1}} <H>{GOOD_HINT}</H></think>\nFinal: \\boxed{{-1}}")
    vote = parse_vote(text)
    assert vote.score == -1
    assert vote.hint is None


def test_answer_only_inside_think_is_unparsed():
    vote = parse_vote(answer(f"<think>\\boxed{{1}} <H>{GOOD_HINT}</H></think>"))
    assert vote.score is None
    assert vote.hint is None


def test_unclosed_think_at_start_is_all_thinking():
    vote = parse_vote(answer(f"<think>The answer is \\boxed{{1}} <H>{GOOD_HINT}</H> and I keep going"))
    assert vote.score is None
    assert vote.hint is None


def test_unclosed_think_later_drops_only_the_tail():
    vote = parse_vote("Verdict \\boxed{-1} <think> hmm, maybe \\boxed{1}")
    assert vote.score == -1


def test_orphan_closing_think_drops_what_precedes_it():
    # Templates that put `<think>` into the prompt produce answers that only contain the close tag.
    vote = parse_vote(answer(f"reasoning \\boxed{{-1}} ...</think>\n\\boxed{{1}} <H>{GOOD_HINT}</H>"))
    assert vote.score == 1
    assert vote.hint == GOOD_HINT


def test_several_think_blocks_case_insensitive():
    text = "<THINK>\\boxed{1}</THINK> a <think>\\boxed{1}</think> b \\boxed{-1}"
    assert strip_thinking(text).strip() == "a  b \\boxed{-1}"
    assert parse_vote(text).score == -1


@pytest.mark.parametrize("text", ["", "   \n\t ", None])
def test_empty_output_is_unparsed(text):
    vote = parse_vote(text)
    assert vote.score is None
    assert vote.hint is None
    assert vote.raw == (text or "")


def test_whitespace_only_hint_is_no_hint():
    vote = parse_vote(answer("\\boxed{1} <H>   \n  </H>"))
    assert vote.score == 1
    assert vote.hint is None


def test_hint_needs_more_than_ten_chars():
    assert parse_vote(answer("\\boxed{1} <H>  Use -f.  </H>")).hint is None
    assert parse_vote(answer("\\boxed{1} <H>123456789</H>")).hint is None
    assert parse_vote(answer("\\boxed{1} <H>1234567890</H>")).hint is None  # exactly 10: not enough
    assert parse_vote(answer("\\boxed{1} <H> 12345678901 </H>")).hint == "12345678901"
    from judge.config import JudgeConfig

    assert JudgeConfig().min_hint_chars == 11


def test_min_hint_chars_is_configurable():
    assert last_hint(answer("<H>Use -f.</H>"), min_hint_chars=3) == "Use -f."


def test_hint_is_stripped_and_keeps_inner_lines():
    assert (
        last_hint(answer("<H>\n  Line one of the hint.\nLine two.  \n</H>"))
        == "Line one of the hint.\nLine two."
    )


def test_raw_text_is_kept():
    text = "<think>x</think> \\boxed{-1}"
    assert parse_vote(text).raw == text


def test_nested_final_box_is_read_whole_not_skipped():
    # The final box has nested braces; an earlier box must not count in its place.
    assert parse_vote("First \\boxed{1} ... on reflection \\boxed{\\text{-1}}").score == -1
    assert parse_vote("First \\boxed{-1} ... no: \\boxed{\\text{ +1 }}").score == 1
    assert last_boxed_score("\\boxed{\\text{1}}") == 1
    assert last_boxed_score("\\boxed{\\text{\\text{-1}}}") == -1


@pytest.mark.parametrize(
    ("text", "score"),
    [
        ("\\boxed{ + 1 }", 1),
        ("\\boxed{- 1}", -1),
        ("\\boxed{\\text{ - 1 }}", -1),
        ("\\boxed{\n1\n}", 1),
        ("\\boxed{1}}", 1),  # a stray closing brace after a complete box
        ("\\boxed{1} \\boxed{-1", None),  # the final box never closes: the verdict was cut off
        ("\\boxed{-1} then \\boxed{{1}}", None),  # a bare group is not a value
        ("\\boxed{-1} then \\boxed{\\mathbf{1}}", None),  # only \\text{} is unwrapped
        ("\\boxed{\\text{1}\\text{1}}", None),  # two groups, not one wrapper
        ("\\boxed{\\text{1}", None),
        ("\\boxed{1\\}}", None),  # an escaped brace is content, not the end of the box
        ("\\boxed{1} and \\boxed{\\text{yes}}", None),
        ("\\boxed{1}\\boxed{\\boxed{-1}}", None),
        ("\\boxed{+-1}", None),
    ],
)
def test_adversarial_boxes(text, score):
    assert parse_vote(text).score == score


def test_a_box_quoted_inside_the_hint_does_not_change_the_verdict():
    vote = parse_vote(answer("\\boxed{1}\n<H>Never print \\boxed{-1} to the log; fix the parser first.</H>"))
    assert vote.score == 1
    assert vote.hint == "Never print \\boxed{-1} to the log; fix the parser first."
    assert parse_vote(answer("<H>Say \\boxed{1} only when the test passes.</H> \\boxed{-1}")).score == -1


PIECES = list("ab1-+{} <>/\\") + ["\\boxed{", "<think>", "</think>", HINT_START, HINT_END, "Check the path."]


@given(st.lists(st.sampled_from(PIECES), max_size=40).map("".join))
def test_parse_never_raises_and_respects_invariants(text):
    vote = parse_vote(text)
    assert vote.score in (None, 1, -1)
    assert vote.hint is None or len(vote.hint) > 10
    assert vote.hint is None or (HINT_START not in vote.hint and HINT_END not in vote.hint)
    assert vote.raw == text
    if "<think>" in text and "</think>" not in text and text.lstrip().startswith("<think>"):
        assert vote.score is None and vote.hint is None
