"""The rules hint judge's user-feedback finding (`rules_quote_user_feedback`): a person's reply
behind the proxy becomes a quoted hint when it is read as a correction or a redo request; an
acceptance or a reply the reader cannot read does not (and is counted); tool output never does."""

from __future__ import annotations

import asyncio

from judge.config import JudgeConfig
from judge.rules_backend import RulePatterns, RulesJudgeBackend, mark_code, pair_hint
from judge.user_feedback import plain_acceptance
from tests.support.judge_pairs import pair_with, tool

QUOTING = RulePatterns.from_config(JudgeConfig(backend="rules", rules_quote_user_feedback=True))
DEFAULT = RulePatterns.from_config(JudgeConfig(backend="rules"))
CORRECTION = "Wrong name: our team starts every function name with compute_, so this one is compute_total."


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def test_a_correction_is_the_hint_whole_in_the_users_own_words_with_its_code_marked():
    pair = pair_with(tool("wrote 40 bytes to helpers.py", "write_file"), user(CORRECTION))
    assert pair_hint(pair, QUOTING) == (
        "Wrong name: our team starts every function name with `compute_`, so this one is `compute_total`."
    )


def test_code_is_marked_as_a_markdown_chat_shows_it():
    assert (
        mark_code("Put compute_total(x) in helpers.py, e.g. now.")
        == "Put `compute_total(x)` in `helpers.py`, e.g. now."
    )
    assert (
        mark_code("Keep `my file.txt` and main.rs; i.e. both.")
        == "Keep `my file.txt` and `main.rs`; i.e. both."
    )
    assert mark_code("No code here, just words.") == "No code here, just words."


def test_off_by_default_so_the_env_is_unchanged():
    pair = pair_with(tool("wrote 40 bytes to helpers.py", "write_file"), user(CORRECTION))
    assert pair_hint(pair, DEFAULT) is None


def test_a_plain_acceptance_gives_no_hint_and_a_mixed_reply_does():
    assert pair_hint(pair_with(user("Thanks, that works.")), QUOTING) is None
    assert plain_acceptance("Thanks, that works.")
    mixed = "Thanks, but that is the wrong file: code goes in helpers.py."
    assert not plain_acceptance(mixed)
    assert pair_hint(pair_with(user(mixed)), QUOTING).startswith("Thanks, but")


def test_a_reply_that_states_a_convention_is_quoted():
    text = "Our team keeps every function in helpers.py."
    assert "helpers.py" in pair_hint(pair_with(user(text)), QUOTING)


def test_a_reply_the_reader_cannot_read_is_no_hint_and_is_counted():
    backend = RulesJudgeBackend(JudgeConfig(backend="rules", m=1, rules_quote_user_feedback=True))
    unread = pair_with(tool("wrote 40 bytes to helpers.py", "write_file"), user("What time is it in Tokyo?"))
    assert pair_hint(unread, QUOTING) is None
    (vote,) = asyncio.run(backend.collect_votes(unread))
    assert vote.score == -1 and vote.hint is None
    asyncio.run(backend.collect_votes(pair_with(user("All sorted, ta."))))
    asyncio.run(backend.collect_votes(pair_with(user(CORRECTION))))
    assert backend.feedback_tally.as_metrics() == {
        "judge/user_feedback_redo": 0,
        "judge/user_feedback_correction": 1,
        "judge/user_feedback_acceptance": 1,
        "judge/user_feedback_unread": 1,
        "judge/user_feedback_read": 3,
    }


def test_tool_output_is_never_read_as_the_user():
    pair = pair_with(tool("Wrong name: call it compute_total", "write_file"))
    assert pair_hint(pair, QUOTING) is None


def test_a_failure_finding_comes_first_and_the_reply_second():
    pair = pair_with(tool("Error: tool call is not valid JSON", "write_file"), user(CORRECTION))
    hint = pair_hint(pair, QUOTING)
    assert hint.startswith("The tool call failed: `tool call is not valid JSON`. Wrong name: our team")
    assert hint.endswith('Write each call as one valid JSON object with a "name" and an "arguments" object.')


def test_long_replies_are_cut_and_markers_defused():
    text = "No. \\boxed{1} " + "x" * 600
    hint = pair_hint(pair_with(user(text)), QUOTING)
    assert len(hint) == 400 and hint.endswith("...")
    assert "\\boxed" not in hint


def test_the_backend_votes_the_quoted_hint():
    config = JudgeConfig(backend="rules", m=3, rules_quote_user_feedback=True)
    votes = asyncio.run(RulesJudgeBackend(config).collect_votes(pair_with(user(CORRECTION))))
    assert len(votes) == 3 and all("`compute_total`" in (v.hint or "") for v in votes)
