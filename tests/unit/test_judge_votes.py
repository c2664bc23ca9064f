"""Vote policies and hint choice."""

from __future__ import annotations

import pytest

from judge.parsing import Vote
from judge.votes import (
    choose_longest,
    choose_representative,
    decide_votes,
    jaccard,
    representativeness,
    word_set,
)

HINT_A = "Run pytest on the tests directory before you say the fix works."
HINT_B = "Check that the config file path exists before you open it."


def pos(hint: str | None = HINT_A) -> Vote:
    return Vote(score=1, hint=hint, raw="")


def neg() -> Vote:
    return Vote(score=-1, hint=None, raw="")


def unparsed() -> Vote:
    return Vote(score=None, hint=None, raw="garbage")


def failed() -> Vote:
    return Vote.failure("APITimeoutError: timed out")


def test_one_of_three_positive_rejected_by_majority_accepted_by_any():
    votes = [pos(), neg(), neg()]
    majority = decide_votes(votes, "majority")
    assert not majority.accepted and majority.hint is None
    assert (majority.positive, majority.negative, majority.unparsed) == (1, 2, 0)
    assert majority.agreement == pytest.approx(2 / 3)

    any_ = decide_votes(votes, "any")
    assert any_.accepted and any_.hint == HINT_A
    assert any_.agreement == pytest.approx(1 / 3)


def test_two_of_three_positive_accepted():
    outcome = decide_votes([pos(), neg(), pos(HINT_B)], "majority")
    assert outcome.accepted
    assert outcome.hint in (HINT_A, HINT_B)
    assert outcome.agreement == pytest.approx(2 / 3)


def test_exact_half_is_not_a_majority():
    assert not decide_votes([pos(), neg()], "majority").accepted
    assert not decide_votes([pos(), pos(), neg(), neg()], "majority").accepted


def test_majority_of_parsed_leaves_unparsed_votes_out_of_the_denominator():
    outcome = decide_votes([pos(), unparsed(), failed()], "majority_of_parsed")
    assert outcome.accepted
    assert (outcome.n, outcome.positive, outcome.negative, outcome.unparsed) == (3, 1, 0, 2)
    assert outcome.agreement == 1.0

    assert not decide_votes([pos(), neg(), unparsed()], "majority_of_parsed").accepted


def test_majority_is_strict_over_the_votes_requested():
    # Two of three judge calls timed out: one +1 is not a majority of three.
    outcome = decide_votes([pos(), failed(), failed()], "majority")
    assert not outcome.accepted and outcome.hint is None
    assert (outcome.positive, outcome.unparsed, outcome.failed, outcome.quorum) == (1, 2, 2, 2)
    assert not decide_votes([pos(), unparsed(), failed()], "majority").accepted
    assert not decide_votes([pos(), unparsed(), unparsed()], "majority").accepted
    # Two +1 of three is a majority whatever the third vote is.
    for third in (neg(), unparsed(), failed()):
        assert decide_votes([pos(), pos(HINT_B), third], "majority").accepted
    # Votes that never came back count as not-yes: 2 returned +1 of m=5 requested is not enough.
    short = decide_votes([pos(), pos(HINT_B)], "majority", requested=5)
    assert not short.accepted and short.quorum == 3 and short.as_dict()["requested"] == 5
    assert decide_votes([pos(), pos(HINT_B), pos()], "majority", requested=5).accepted


@pytest.mark.parametrize(
    ("m", "quorum", "positives", "accepted"),
    [
        (3, None, 2, True),
        (3, None, 1, False),
        (4, None, 2, False),
        (4, None, 3, True),
        (5, 1, 1, True),
        (5, 4, 3, False),
        (5, 4, 4, True),
        (3, 3, 2, False),
        (3, 3, 3, True),
    ],
)
def test_configurable_quorum(m, quorum, positives, accepted):
    votes = [pos()] * positives + [failed()] * (m - positives)
    outcome = decide_votes(votes, "majority", quorum=quorum)
    assert outcome.accepted is accepted
    assert outcome.quorum == (m // 2 + 1 if quorum is None else quorum)


def test_quorum_outside_one_to_m_is_an_error():
    with pytest.raises(ValueError, match="quorum must be between 1 and m=3"):
        decide_votes([pos(), pos(), pos()], "majority", quorum=4)
    from judge.config import JudgeConfig

    with pytest.raises(ValueError, match="quorum=4 is more than the m=3 votes requested"):
        JudgeConfig(m=3, quorum=4)
    assert JudgeConfig().quorum is None and JudgeConfig().vote_policy == "majority"


def test_all_unparsed_is_rejected_under_every_policy():
    votes = [unparsed(), failed(), unparsed()]
    for policy in ("majority", "any"):
        outcome = decide_votes(votes, policy)
        assert not outcome.accepted
        assert outcome.hint is None
        assert outcome.unparsed == 3
        assert outcome.agreement == 0.0


def test_no_votes_is_rejected():
    outcome = decide_votes([], "majority")
    assert not outcome.accepted and outcome.n == 0


def test_positive_without_hint_counts_but_cannot_supply_the_hint():
    # Two positives (one hintless) of three parseable: a majority, and the one hint is used.
    outcome = decide_votes([pos(None), pos(HINT_B), neg()], "majority")
    assert outcome.accepted and outcome.hint == HINT_B
    assert outcome.positive == 2 and outcome.positive_with_hint == 1
    # A positive majority with no hint at all has nothing to give the teacher.
    outcome = decide_votes([pos(None), pos(None), neg()], "majority")
    assert not outcome.accepted and outcome.hint is None
    # `any` needs a positive WITH a hint.
    assert not decide_votes([pos(None), neg(), neg()], "any").accepted


def test_hints_of_negative_votes_are_never_used():
    negative_with_hint = Vote(score=-1, hint=HINT_B, raw="")
    outcome = decide_votes([pos(HINT_A), pos(HINT_A), negative_with_hint], "majority", "longest")
    assert outcome.hint == HINT_A


def test_longest_hint_choice():
    short, long_ = "Use python3, not python.", "Use python3 instead of python; python is not installed here."
    outcome = decide_votes([pos(short), pos(long_), pos(short)], "majority", "longest")
    assert outcome.hint == long_
    assert choose_longest(["abc def gh", "abcdefghijk", "xyz"]) == "abcdefghijk"
    assert choose_longest(["same length a", "same length b"]) == "same length a"


def test_representative_picks_the_consensus_not_the_longest():
    consensus_1 = "Install the missing numpy package with pip before running the script."
    consensus_2 = "Install numpy with pip before running the script."
    outlier = (
        "Consider rewriting the entire project in Rust for performance and also add many more unit tests."
    )
    hints = [outlier, consensus_1, consensus_2]
    chosen = choose_representative(hints)
    assert chosen in (consensus_1, consensus_2)
    assert chosen != outlier
    scores = representativeness(hints)
    assert scores[0] < min(scores[1], scores[2])
    # The reference policy would take the outlier.
    assert choose_longest(hints) == outlier
    outcome = decide_votes([pos(h) for h in hints], "majority", "representative")
    assert outcome.hint == chosen


def test_representative_hand_computed_scores():
    a, b, c = "alpha beta gamma delta", "alpha beta gamma", "alpha zeta"
    # J(a,b)=3/4, J(a,c)=1/5, J(b,c)=1/4
    assert representativeness([a, b, c]) == pytest.approx(
        [(0.75 + 0.2) / 2, (0.75 + 0.25) / 2, (0.2 + 0.25) / 2]
    )
    assert choose_representative([a, b, c]) == b


def test_representative_with_two_hints_does_not_prefer_the_shorter_one():
    informative = "Run pytest on tests/test_parser.py and fix the failing assertion before answering."
    padded = "Run tests.!!!!!!"
    # Two candidates always tie on overlap; the tie goes to the hint that says more, in either order.
    assert choose_representative([padded, informative]) == informative
    assert choose_representative([informative, padded]) == informative
    assert decide_votes([pos(padded), pos(informative), neg()], "majority").hint == informative
    # Padding and repetition add no distinct words, so they cannot win either.
    repeated = "Check the path. Check the path. Check the path. Check the path."
    assert choose_representative([repeated, "Check the path of the input file first."]) == (
        "Check the path of the input file first."
    )
    # The same number of distinct words: the earlier vote, whichever is shorter.
    assert choose_representative(["Use flag -x here now!!", "Use flag -y here."]) != "Use flag -y here."
    assert choose_representative(["Use -x here.", "Use flag -y here, now."]) == "Use flag -y here, now."
    assert choose_representative(["Use flag -x.", "Use the flag -y here."]) == "Use the flag -y here."
    assert choose_representative(["Use flag -x here.", "Use flag -y here!!!"]) == "Use flag -x here."
    assert choose_representative(["Use flag -y here!!!", "Use flag -x here."]) == "Use flag -y here!!!"
    # A single hint is chosen.
    assert choose_representative([HINT_A]) == HINT_A


def test_word_sets_are_lowercased_and_punctuation_free():
    assert word_set("Run PyTest, then run pytest!") == {"run", "pytest", "then"}
    assert jaccard(frozenset(), frozenset()) == 0.0
    assert jaccard(word_set("a b"), word_set("b c")) == pytest.approx(1 / 3)


def test_as_dict_is_provenance_ready():
    outcome = decide_votes([pos(), neg(), failed()], "majority", "longest")
    d = outcome.as_dict()
    assert d == {
        "n": 3,
        "positive": 1,
        "negative": 1,
        "unparsed": 1,
        "policy": "majority",
        "accepted": False,
        "agreement": 0.5,
        "hint_choice": "longest",
        "positive_with_hint": 1,
        "failed": 1,
        "requested": 3,
        "quorum": 2,
    }


def test_unknown_policy_is_an_error():
    with pytest.raises(ValueError):
        decide_votes([pos()], "plurality")  # type: ignore[arg-type]


def test_env_config_passes_quorum_and_policies_through():
    from environments.atropos.agentic_opd_config import AgenticOPDConfig

    judge = AgenticOPDConfig(judge_votes=5, judge_quorum=4, vote_policy="majority").opd_config().judge
    assert (judge.m, judge.quorum, judge.vote_policy, judge.min_hint_chars) == (5, 4, "majority", 11)
    assert (
        AgenticOPDConfig(vote_policy="majority_of_parsed").opd_config().judge.vote_policy
        == "majority_of_parsed"
    )
    with pytest.raises(ValueError, match="quorum=4 is more than the m=3 votes requested"):
        AgenticOPDConfig(judge_votes=3, judge_quorum=4).opd_config()
