"""The lexical reader of a user's reply (judge/user_feedback.py, issue #43): acceptances and
corrections in plain English beyond a word list, and a reply it cannot read left unread. These
phrasings are the ones the rules were written from; the held-out ones it is measured on are
judge/eval/user_feedback_heldout.jsonl (tests/unit/test_user_feedback_heldout.py)."""

from __future__ import annotations

import pytest

from judge.user_feedback import accepts, corrects, plain_acceptance, read_reply

ACCEPTANCES = [
    "Thanks, that works.",
    "Perfect, that's what I wanted.",
    "Looks good, thank you.",
    "Great job!",
    "lgtm",
    "LGTM, merging.",
    "That's the one.",
    "Yes, exactly right.",
    "ok thx",
    "Wonderful, that solved it.",
    "Cheers, all working now",
    "Right, that's sorted then.",
    "Superb. No complaints.",
    "Fantastic - the build is green again.",
    "Works like a charm",
    "No errors any more, thank you!",
    "It doesn\u2019t crash anymore, nice.",
    "Looks right to me",
    "Yeah that's correct",
    "Much appreciated, that's done.",
    "Good to go.",
    "Beautiful. Shipping it.",
    "Everything passes now.",
    "Happy with that.",
    "Brill, ta",
    "Sure, that's fine.",
    "Accepted.",
    "Can't complain, well done.",
    "Tests are passing, good work",
    "Not bad at all, thanks",
    "\U0001f44d",
    "Great, that should do it.",
]
CORRECTIONS = [
    "No, I meant `slug.py`.",
    "Change the name to make_slug.",
    "Great, thanks, but rename it to make_slug.",
    "That's the wrong file; it belongs in utils.py",
    "Still failing with TypeError: unsupported operand",
    "The import is missing at the top of the file.",
    "Use f-strings, not % formatting.",
    "Hmm, it returns None for empty input, it should return an empty string.",
    "Please keep the public API unchanged.",
    "Can you use snake_case for the variable names?",
    "You've swapped the arguments, width comes first.",
    "Don't commit the .env file.",
    "That broke the login page.",
    "nope, wrong branch - this goes on develop",
    "Almost: the last element is dropped.",
    "This isn't what I asked for, I need a CSV not JSON.",
    "Revert that, and make the change in config.py instead.",
    "I asked for the median, not the mean.",
    "It's off by one at the end of the range.",
    "The docstring says int but it returns a float, it must return an int.",
    "Why did you delete the tests?",
    "You forgot the header row",
    "Put the constants at module level.",
    "Still seeing the same warning.",
    "Could you make the timeout configurable instead of hard-coding it?",
    "Not right, the totals don't add up",
    "Shouldn't this be async?",
    "Rename helper() to build_row().",
    "It prints nothing when the list is empty; it ought to print 'empty'.",
    "The test still fails: expected 3, got 2",
    "Ok, but use tabs.",
]
UNREAD = [
    "",
    "   ",
    "Now write the tests for it.",
    "What time is it in Tokyo?",
    "Here is the next task: parse the log file.",
]


@pytest.mark.parametrize("text", ACCEPTANCES)
def test_acceptances_in_plain_english(text):
    reading = read_reply(text)
    assert reading.kind == "acceptance", reading
    assert accepts(text) and plain_acceptance(text) and not corrects(text)


@pytest.mark.parametrize("text", CORRECTIONS)
def test_corrections_in_plain_english(text):
    reading = read_reply(text)
    assert reading.kind == "correction", reading
    assert corrects(text) and not accepts(text)


@pytest.mark.parametrize("text", UNREAD)
def test_a_reply_it_cannot_read_is_neither(text):
    assert read_reply(text).kind == "unread"
    assert not accepts(text) and not corrects(text)


def test_a_redo_request_is_a_redo_whatever_else_it_says():
    assert read_reply("Thanks, but try again please.").kind == "redo"
    assert corrects("Start over.")


def test_a_follow_up_request_after_an_acceptance_is_not_a_correction():
    assert read_reply("Yes. Now add a docstring.").kind == "acceptance"
    assert read_reply("Thanks! Next, do the same for the CSV reader.").kind == "acceptance"
    assert read_reply("Thanks! Also, rename it to load_rows.").kind == "correction"  # a change, after a comma


def test_the_cues_that_decided_are_named():
    reading = read_reply("Great, thanks, but rename it to make_slug.")
    assert "imperative" in reading.correction_cues and "thanks" in reading.acceptance_cues
    assert read_reply("Raises ValueError on empty input").correction_cues == ("error name",)


def test_a_huge_reply_is_read_by_its_start_in_milliseconds():
    import time

    started = time.perf_counter()
    assert read_reply(" " * 1_000_000 + "Thanks! " + "x " * 500_000).kind == "acceptance"
    assert read_reply("not " * 250_000).kind == "correction"
    assert time.perf_counter() - started < 1.0
