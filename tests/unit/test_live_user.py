"""The simulated user of `hermes-opd bench live` (hermes_opd/learning_study/live_user.py): which
outcome it reads off an attempt, its words, and that the dev judges read those words as meant."""

from __future__ import annotations

import json
import random

import pytest

from environments.tasks.conventions import generate
from hermes_opd.contract.errors import ConfigError
from hermes_opd.learning_study.live_user import OUTCOMES, Phrasings, outcome_of, user_reply
from judge.config import JudgeConfig
from judge.prm_rules_backend import process_verdict
from judge.rules_backend import RulePatterns, mark_code, pair_hint
from tests.support.judge_pairs import pair_with, tool

TRAIN = generate()["train"]
NAME_TASK = next(t for t in TRAIN if t.kind == "name")
MODULE_TASK = next(t for t in TRAIN if t.kind == "module")
RIGHT = {"helpers.py": f"def {NAME_TASK.function}(x):\n    return {NAME_TASK.expression}\n"}
QUOTING = RulePatterns.from_config(JudgeConfig(backend="rules", rules_quote_user_feedback=True))


def test_outcomes_as_a_reviewing_person_reads_them():
    assert outcome_of(NAME_TASK, RIGHT, passed=True) == "accept"
    assert outcome_of(NAME_TASK, {}, passed=False) == "no_file"
    assert (
        outcome_of(MODULE_TASK, {"utils.py": f"def {MODULE_TASK.function}(x): ..."}, passed=False)
        == "wrong_module"
    )
    wrong_name = {"helpers.py": f"def get_{NAME_TASK.noun}(x):\n    return x\n"}
    assert outcome_of(NAME_TASK, wrong_name, passed=False) == "wrong_name"
    # a definition of the right name in a comment or a longer name is not the right name
    assert (
        outcome_of(NAME_TASK, {"helpers.py": f"# def {NAME_TASK.function}(x)\n"}, passed=False)
        == "wrong_name"
    )
    assert (
        outcome_of(NAME_TASK, {"helpers.py": f"def {NAME_TASK.function}_2(x): ..."}, passed=False)
        == "wrong_name"
    )
    assert outcome_of(NAME_TASK, RIGHT, passed=False) == "wrong_value"


def test_a_reply_is_drawn_by_the_seeded_rng_and_names_the_convention():
    replies = {
        user_reply(NAME_TASK, "wrong_name", {"helpers.py": ""}, Phrasings(), random.Random(i))
        for i in range(30)
    }
    assert len(replies) == len(Phrasings().wrong_name)  # every template is drawn
    assert all("compute_" in r for r in replies)
    same = [
        user_reply(MODULE_TASK, "wrong_module", {"utils.py": ""}, Phrasings(), random.Random(7))
        for _ in range(3)
    ]
    assert len(set(same)) == 1 and "helpers.py" in same[0]


@pytest.mark.parametrize("outcome", [o for o in OUTCOMES if o != "accept"])
def test_every_default_correction_is_never_a_plus_one_and_is_a_quoted_hint(outcome):
    for template in getattr(Phrasings(), outcome):
        text = template.format(
            function="compute_total",
            module="helpers.py",
            verb="compute",
            noun="total",
            expression="x + 2",
            written="utils.py",
        )
        pair = pair_with(tool("Wrote 40 bytes to utils.py", "write_file"), {"role": "user", "content": text})
        # the lexical PRM reads a correction word; "Nothing was written. Please write ..." has none (0)
        expected = {-1, 0} if outcome == "no_file" else {-1}
        assert process_verdict(pair, QUOTING)[0] in expected, text
        hint = pair_hint(pair, QUOTING)
        assert hint == mark_code(text)
        if outcome in ("wrong_module", "wrong_name"):  # the convention's value reaches the hint as code
            assert "`helpers.py`" in hint or "`compute_total`" in hint, hint


def test_every_default_acceptance_is_a_plus_one_and_no_hint():
    for text in Phrasings().accept:
        pair = pair_with(
            tool("Wrote 40 bytes to helpers.py", "write_file"), {"role": "user", "content": text}
        )
        assert process_verdict(pair, QUOTING)[0] == 1
        assert pair_hint(pair, QUOTING) is None


def test_phrasings_from_a_file(tmp_path):
    path = tmp_path / "p.json"
    path.write_text(
        json.dumps({"wrong_name": ["We prefix names with {verb}_: {function}."], "accept": "Fine."})
    )
    loaded = Phrasings.load(path)
    assert loaded.wrong_name == ("We prefix names with {verb}_: {function}.",) and loaded.accept == ("Fine.",)
    assert loaded.wrong_module == Phrasings().wrong_module  # the rest keep their defaults


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"wrong_nmae": ["x"]}, "unknown outcomes ['wrong_nmae']"),
        ({"accept": []}, "'accept' must be a non-empty list of non-empty strings"),
        ({"accept": ["Thanks {name}"]}, "uses an unknown field 'name'"),
    ],
)
def test_bad_phrasings_are_refused_with_the_reason(data, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        Phrasings.from_mapping(data)
