"""No hidden expected value reaches the agent: feedback describes public tests only, and a
lookup-table solution built from everything the agent saw (the prompt and every round of
feedback) scores no more on the hidden tests than a blank one."""

from __future__ import annotations

import ast
import asyncio
import json
import re
from pathlib import Path

import pytest

from environments.rollout.verifier import VerificationResult, VerifierConfig, verify
from environments.rollout.verifier_feedback import choose_public
from environments.tasks.builtin import builtin_tasks
from environments.tasks.suite_format import parse_suite
from environments.tasks.task import Task

VALUES = [3, -7, 12, 25, 41, 58, 64, 99]  # square(x) for each: two public tests, six hidden
PUBLIC = {0, 1}


def data_task() -> Task:
    tests = [
        {"name": f"test_{i}", "public": i in PUBLIC, "checks": [{"expr": f"square({x})", "returns": x * x}]}
        for i, x in enumerate(VALUES)
    ]
    return Task(
        task_id="sq-data", prompt="Write square(x).", hidden_tests={"imports": ["square"], "tests": tests}
    )


def code_task() -> Task:
    lines = [f"assert square({x}) == {x * x}" for x in VALUES]
    suite = {
        "kind": "code",
        "code": "\n".join(lines),
        "public": [f"test_assert_line_{i + 1}" for i in PUBLIC],
    }
    return Task(task_id="sq-code", prompt="Write square(x).", hidden_tests=suite)


def stdio_task() -> Task:
    cases = [{"input": f"{x}\n", "output": f"{x * x}\n", "public": i in PUBLIC} for i, x in enumerate(VALUES)]
    example = cases[0]
    prompt = f"Read x, print x*x.\nExample input:\n```\n{example['input']}```\nExample output:\n```\n{example['output']}```\n"
    return Task(task_id="sq-stdio", prompt=prompt, hidden_tests={"kind": "stdio", "cases": cases})


def function_table(seen: str) -> dict[str, object]:
    """{call source: expected value} from every description of a failing call the agent read."""
    table: dict[str, object] = {}
    for call, expected in re.findall(r"`(square\(.*?\))`\): expected (.+?), got", seen):
        table[call] = ast.literal_eval(expected)
    for call, expected in re.findall(r"\(at: assert (square\(.*?\)) == (.+?)\)", seen):
        table[call] = ast.literal_eval(expected)
    return table


def function_solution(table: dict[str, object]) -> str:
    return f"TABLE = {table!r}\n\ndef square(x):\n    return TABLE.get(f'square({{x!r}})')\n"


def stdio_solution(seen: str) -> str:
    pairs = dict(re.findall(r"Example input:\n```\n(.*?)```\nExample output:\n```\n(.*?)```", seen, re.S))
    for expected, got in re.findall(r"expected '(.*?)', got '(.*?)'", seen):
        pairs.setdefault(got, expected)
    return f"import sys\nTABLE = {pairs!r}\nsys.stdout.write(TABLE.get(sys.stdin.read(), ''))\n"


async def score(task: Task, source: str, tmp_path: Path) -> VerificationResult:
    (tmp_path / "solution.py").write_text(source)
    return await verify(task, tmp_path)


def hidden_passed(result: VerificationResult) -> int:
    return sum(t.passed for t in result.tests if not t.public)


def public_passed(result: VerificationResult) -> int:
    return sum(t.passed for t in result.tests if t.public)


@pytest.mark.parametrize("make_task", [data_task, code_task, stdio_task], ids=["data", "code", "stdio"])
async def test_a_lookup_table_from_everything_seen_gains_nothing_on_hidden_tests(make_task, tmp_path):
    task = make_task()
    blank_source = "import sys\n" if task.task_id == "sq-stdio" else "def square(x):\n    return None\n"
    blank = await score(task, blank_source, tmp_path)
    seen = task.prompt + "\n" + blank.feedback
    source = blank_source
    for _round in range(2):  # resubmit after each round of feedback, as an agent could
        source = (
            stdio_solution(seen) if task.task_id == "sq-stdio" else function_solution(function_table(seen))
        )
        result = await score(task, source, tmp_path)
        seen += "\n" + result.feedback
    assert public_passed(result) >= 1  # the table works: it learned the public answers it was shown
    assert hidden_passed(result) == hidden_passed(blank) == 0
    for i, x in enumerate(VALUES):
        if i not in PUBLIC:
            assert str(x * x) not in seen, (x, seen)  # no hidden answer anywhere the agent looked


async def test_builtin_feedback_never_quotes_a_hidden_expected_value(tmp_path):
    config = VerifierConfig(public_fraction=0.5)
    gate = asyncio.Semaphore(2)

    async def feedback(task: Task) -> str:
        async with gate:
            directory = tmp_path / task.task_id
            directory.mkdir()
            (directory / "solution.py").write_text("def unused():\n    pass\n")
            return (await verify(task, directory, config=config)).feedback

    tasks = builtin_tasks()
    for task, shown in zip(tasks, await asyncio.gather(*map(feedback, tasks)), strict=True):
        public = choose_public(task.task_id, parse_suite(task.hidden_tests).names, frozenset(), 0.5)
        assert public and any(name in shown for name in public)  # public failures are described
        for test in parse_suite(task.hidden_tests).tests:
            if test.name in public:
                continue
            assert test.name not in shown, (task.task_id, test.name)
            for check in test.checks:
                if check.expects_value and len(json.dumps(check.returns)) >= 6:
                    assert json.dumps(check.returns) not in shown and repr(check.returns) not in shown


def test_public_choice_is_deterministic_and_honours_marks():
    names = [f"t{i}" for i in range(200)]
    chosen = choose_public("task", names, frozenset({"t0"}), 0.25)
    assert chosen == choose_public("task", names, frozenset({"t0"}), 0.25)
    assert "t0" in chosen and 30 < len(chosen) < 70
    assert choose_public("task", names, frozenset(), 0.0) == frozenset()
    assert choose_public("task", names, frozenset(), 1.0) == frozenset(names)
    with pytest.raises(ValueError, match="public_fraction must be in"):
        choose_public("task", names, frozenset(), 1.5)
