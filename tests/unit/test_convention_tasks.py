"""The convention task family (environments/tasks/conventions.py): deterministic generation, disjoint
splits, the shipped files, and the reveal: the verifier's feedback on a wrong attempt names the
convention, the rules judge turns exactly that into a hint, and the env's turn pairs hand it to the
turn that made the attempt."""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path

import pytest

from environments.rollout.verifier import verify
from environments.tasks import conventions
from environments.tasks.conventions import (
    HELDOUT_NOUNS,
    PREFERRED_MODULE,
    PREFERRED_VERB,
    TRAIN_NOUNS,
    convention_splits,
    generate,
    generated_text,
    shipped_text,
)
from hermes_opd.record.trajectory import Trajectory, TurnSpan
from hermes_opd.record.turn_pairs import extract_turn_pairs
from judge.config import JudgeConfig
from judge.rules_backend import RulePatterns, rule_hint

PATTERNS = RulePatterns.from_config(JudgeConfig())


def test_generator_is_deterministic_and_the_seed_matters():
    first, again, other = generate(0), generate(0), generate(1)
    assert first == again
    assert [t.task_id for t in first["train"]] != [t.task_id for t in other["train"]]
    assert {t.task_id for t in first["train"]} == {t.task_id for t in other["train"]}


def test_shipped_files_are_what_the_generator_writes():
    for split in conventions.SPLITS:
        assert shipped_text(split) == generated_text(split), (
            f"conventions/{split}.jsonl is stale: run `python -m environments.tasks.conventions`"
        )


def test_splits_are_disjoint_and_share_only_the_convention():
    train, heldout = generate()["train"], generate()["heldout"]
    assert len(train) == 2 * len(TRAIN_NOUNS) == 56 and len(heldout) == 2 * len(HELDOUT_NOUNS) == 24
    assert not set(TRAIN_NOUNS) & set(HELDOUT_NOUNS)
    assert not {t.task_id for t in train} & {t.task_id for t in heldout}
    assert not {t.function for t in train} & {t.function for t in heldout}
    for task in train + heldout:
        assert task.function == f"{PREFERRED_VERB}_{task.noun}" and task.module == PREFERRED_MODULE
        assert task.expected_value in task.candidates and len(task.candidates) == 4
        assert task.expected_value in task.prompt()  # offered, but never singled out:
        assert "compute" not in task.prompt().split("decides")[1]
    positions = [t.candidates.index(t.expected_value) for t in train + heldout]
    assert len(set(positions)) == 4  # the right candidate is not always in the same place


def test_loaded_splits_are_the_generated_tasks_in_the_task_format():
    train, heldout = convention_splits()
    assert [t.task_id for t in train] == [t.task_id for t in generate()["train"]]
    assert [t.task_id for t in heldout] == [t.task_id for t in generate()["heldout"]]
    assert all(t.data_tests and t.solution_files == ("helpers.py",) for t in train + heldout)


async def _feedback(task, files: dict[str, str]) -> tuple[float, str]:
    with tempfile.TemporaryDirectory() as directory:
        for name, content in files.items():
            (Path(directory) / name).write_text(content)
        verdict = await verify(task, Path(directory))
    return verdict.score, verdict.feedback


def test_the_reveal_names_the_convention_and_only_after_a_wrong_attempt():
    _, heldout = convention_splits()
    by_kind = {}
    for task, generated in zip(heldout, generate()["heldout"], strict=True):
        by_kind.setdefault(generated.kind, (task, generated))
    (name_task, name_gen), (module_task, module_gen) = by_kind["name"], by_kind["module"]
    wrong_verb = next(c for c in name_gen.candidates if c != name_gen.function)
    body = f"    return {name_gen.expression}\n"

    async def scenario():
        return await asyncio.gather(
            _feedback(name_task, {"helpers.py": f"def {wrong_verb}(x):\n{body}"}),
            _feedback(module_task, {"utils.py": module_task.reference_solution["helpers.py"]}),
            _feedback(name_task, name_task.reference_solution),
        )

    (wrong_name_score, wrong_name), (wrong_file_score, wrong_file), (right_score, right) = asyncio.run(
        scenario()
    )
    assert (wrong_name_score, wrong_file_score, right_score) == (0.0, 0.0, 1.0)
    assert right == "" and rule_hint(right, PATTERNS) is None
    name_hint = rule_hint(wrong_name, PATTERNS)
    assert name_hint.startswith(
        f"The tests could not import the name `{name_gen.function}` from the module `helpers`."
    )
    assert name_hint.endswith(f"Define `{name_gen.function}` in `helpers.py`, with exactly that name.")
    file_hint = rule_hint(wrong_file, PATTERNS)
    assert file_hint.startswith("The checker looks for `helpers.py`, and that file does not exist.")
    assert file_hint.endswith("Write the solution to `helpers.py`.")
    assert module_gen.function not in file_hint  # it says what the next state says, nothing more


def test_verifier_feedback_after_a_final_tool_call_is_that_turns_next_state():
    messages = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": "", "tool_calls": []},
        {"role": "tool", "name": "write_file", "content": "Wrote 40 bytes to utils.py."},
        {"role": "user", "name": "verifier", "content": "0/3 hidden tests passed."},
    ]
    trajectory = Trajectory(
        tokens=[1, 2, 3, 4],
        masks=[-100, -100, 3, 4],
        inference_logprobs=[0.0] * 4,
        messages=messages,
        turns=[TurnSpan(2, 4, message_index=2)],
    )
    (pair,) = extract_turn_pairs(trajectory)
    assert pair.next_state_role == "tool"
    assert (
        pair.next_state_text
        == "[write_file]\nWrote 40 bytes to utils.py.\n\n[verifier]\n0/3 hidden tests passed."
    )
    # A user message after the results of a turn that another turn follows is not pulled in.
    messages.insert(4, {"role": "assistant", "content": "Done."})
    trajectory = Trajectory(
        tokens=[1, 2, 3, 4, 5, 6],
        masks=[-100, -100, 3, 4, -100, 6],
        inference_logprobs=[0.0] * 6,
        messages=messages,
        turns=[TurnSpan(2, 4, message_index=2), TurnSpan(5, 6, message_index=4)],
    )
    first, second = extract_turn_pairs(trajectory)
    assert first.next_state_text == "[write_file]\nWrote 40 bytes to utils.py."
    assert second.next_state_role == "user" and second.next_state_text == "0/3 hidden tests passed."


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "Failing tests:\n- test_a: could not load the solution: ModuleNotFoundError: No module named 'numpy'",
            "The tests could not load the solution: `ModuleNotFoundError: No module named 'numpy'`.",
        ),
        ("Missing solution file(s) (not found): a.py, b.py\n", "The checker looks for `a.py, b.py`"),
    ],
)
def test_rules_judge_reads_the_verifiers_load_errors_and_missing_files(text, expected):
    assert rule_hint(text, PATTERNS).startswith(expected)


def test_task_records_round_trip_through_json():
    for task in generate()["heldout"][:3]:
        record = json.loads(json.dumps(task.record()))
        assert record["reference_solution"] == task.reference_solution()
        assert record["hidden_tests"]["imports"] == [task.function]
