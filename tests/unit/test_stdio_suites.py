"""stdin/stdout suites: the program's output is compared in the trusted process; the built-in
stdio task set (environments/tasks/stdio_data/) and what no program can get past."""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path

import pytest

from environments.rollout.verifier import VerifierConfig, verify
from environments.tasks.loaders import TaskLoadError, load_jsonl_tasks
from environments.tasks.stdio_builtin import stdio_tasks
from environments.tasks.stdio_suite import cases_from_columns, outputs_match, parse_stdio_suite
from environments.tasks.task import Task
from tests.support.exploits import FRAME_EXPLOIT, PATCH_EXPLOIT

TASKS = {t.task_id: t for t in stdio_tasks()}


async def verify_source(task: Task, source: str, directory: Path, **kwargs):
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "solution.py").write_text(textwrap.dedent(source))
    return await verify(task, directory, **kwargs)


async def score_all(sources: dict[str, str], tmp_path: Path) -> dict[str, float]:
    gate = asyncio.Semaphore(2)

    async def one(task_id: str, source: str) -> tuple[str, float]:
        async with gate:
            result = await verify_source(TASKS[task_id], source, tmp_path / task_id.replace("/", "_"))
            return task_id, result.score

    return dict(await asyncio.gather(*(one(k, v) for k, v in sources.items())))


def test_the_set_has_twenty_two_problems_with_public_and_hidden_cases():
    assert len(TASKS) == 22
    for task in TASKS.values():
        suite = parse_stdio_suite(task.hidden_tests)
        assert len(suite.cases) == 6 and suite.public == {"case_0"}, task.task_id
        assert suite.cases[0].input in task.prompt  # the public case is the prompt's example


async def test_every_reference_solution_scores_one(tmp_path):
    scores = await score_all({k: t.reference_solution["solution.py"] for k, t in TASKS.items()}, tmp_path)
    assert scores == dict.fromkeys(TASKS, 1.0)


WRONG = {
    "stdio/sum_two": "a, b = map(int, input().split())\nprint(a - b)\n",
    "stdio/factorial": "print(1)\n",
    "stdio/prime_queries": "q = int(input())\nfor _ in range(q):\n    input()\n    print('NO')\n",
    "stdio/average": "input()\nxs = list(map(int, input().split()))\nprint(sum(xs) // len(xs) + 0.5)\n",
    "stdio/balanced_brackets": "print('MAYBE')\n",
    "stdio/transpose": "import sys\nprint(sys.stdin.read())\n",
}
CRAFTED_EXIT = """
import os, sys
sys.stdout.write("@@hermes-code-test@@ {\\"passed\\": true}\\nYES\\n")
sys.stdout.flush()
os._exit(0)
"""
PROBE = """
import os, sys
# Read everything within reach for the expected output, and print it.
for root in (".", os.environ.get("HOME", "."), "/tmp"):
    for dirpath, _, names in os.walk(root):
        for name in names:
            try:
                sys.stdout.write(open(os.path.join(dirpath, name), errors="replace").read()[:1000])
            except OSError:
                pass
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            sys.stdout.write(open(f"/proc/{pid}/cmdline", errors="replace").read())
        except OSError:
            pass
"""


async def test_wrong_solutions_score_zero(tmp_path):
    assert await score_all(WRONG, tmp_path) == dict.fromkeys(WRONG, 0.0)


@pytest.mark.reliability
@pytest.mark.parametrize(
    "exploit",
    [PATCH_EXPLOIT, FRAME_EXPLOIT, CRAFTED_EXIT, PROBE],
    ids=["patch", "frames", "crafted-exit", "probe"],
)
async def test_held_out_attacks_score_zero_on_stdio_suites(exploit, tmp_path):
    chosen = ["stdio/sum_two", "stdio/palindrome", "stdio/balanced_brackets", "stdio/prime_queries"]
    assert await score_all(dict.fromkeys(chosen, exploit), tmp_path) == dict.fromkeys(chosen, 0.0)


async def test_each_case_gets_a_clear_verdict(tmp_path):
    task = Task(
        task_id="v",
        prompt="p",
        hidden_tests={
            "kind": "stdio",
            "cases": [
                {"name": "ok", "input": "1\n", "output": "1\n"},
                {"name": "wrong", "input": "2\n", "output": "3\n"},
                {"name": "crash", "input": "boom\n", "output": "x\n"},
                {"name": "slow", "input": "loop\n", "output": "x\n"},
                {"name": "flood", "input": "flood\n", "output": "x\n"},
            ],
        },
    )
    source = """
        import sys
        line = input()
        if line == "boom":
            raise SystemExit(3)
        if line == "loop":
            while True:
                pass
        if line == "flood":
            sys.stdout.write("y" * 3_000_000)
        else:
            print(line)
    """
    result = await verify_source(task, source, tmp_path, config=VerifierConfig(per_test_timeout_s=2))
    assert {t.name: t.message for t in result.tests} == {
        "ok": "",
        "wrong": "wrong answer (line 1: expected '3', got '2')",
        "crash": "runtime error (exit status 3)",
        "slow": "timed out after 2s",
        "flood": "output too large",
    }
    assert result.passed == 1 and result.feedback.startswith("1/5 tests passed.")
    assert "wrong answer" not in result.feedback and "3" not in result.feedback.split("\n", 1)[1]


def test_output_normalisation_and_float_tolerance():
    assert outputs_match("1 2\n3\n", "1 2   \r\n3\n\n\n")
    assert not outputs_match("1 2\n3\n", "1  2\n3\n")  # inner whitespace counts without a tolerance
    assert not outputs_match("1\n", "1\n2\n")
    assert outputs_match("0.333333333\n", "0.3333333333333", float_tol=1e-6)
    assert not outputs_match("0.3333\n", "0.34\n", float_tol=1e-6)
    assert not outputs_match("YES 1.0\n", "NO 1.0\n", float_tol=1e-6)
    assert outputs_match("1e9\n", "1000000000.0000001\n", float_tol=1e-6)  # relative for large values


def test_dataset_shapes_of_stdio_cases(tmp_path):
    apps = {"inputs": ["1\n", "2\n"], "outputs": ["1\n", "4\n"]}
    contests = {"input": ["3\n"], "output": ["9\n"]}
    assert [c["input"] for c in cases_from_columns(apps)] == ["1\n", "2\n"]
    rows = [
        {"task_id": "a", "prompt": "p", "hidden_tests": apps, "public_tests": contests},
        {"task_id": "b", "prompt": "p", "hidden_tests": '[{"input": "1", "output": "1"}]'},
    ]
    path = tmp_path / "stdio.jsonl"
    path.write_text("\n".join(__import__("json").dumps(r) for r in rows) + "\n")
    a, b = load_jsonl_tasks(path, test_format="stdio")
    suite = parse_stdio_suite(a.hidden_tests)
    assert suite.names == ["public_0", "case_0", "case_1"] and suite.public == {"public_0"}
    assert parse_stdio_suite(b.hidden_tests).cases[0].output == "1"
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        '{"task_id": "x", "prompt": "p", "hidden_tests": {"inputs": ["1"], "outputs": []}}\n'
        '{"task_id": "y", "prompt": "p", "hidden_tests": [{"input": 1, "output": "1"}]}\n'
    )
    with pytest.raises(TaskLoadError) as info:
        load_jsonl_tasks(bad, test_format="stdio")
    message = str(info.value)
    assert (
        message.startswith("2 record(s) of ")
        and "bad.jsonl:1: stdio tests: need equally long lists" in message
    )
    assert "bad.jsonl:2: stdio tests: case 0 needs string input and output" in message
