"""The verifier: hidden tests decide the score, and nothing the agent prints can forge it."""

from __future__ import annotations

import asyncio
import json
import textwrap
from pathlib import Path

import pytest

from environments.rollout.sandbox.sandbox import Sandbox
from environments.rollout.tools import Jail, write_bytes
from environments.rollout.verifier import CHILD_RESULT_MARK, VerifierConfig, verify
from environments.tasks.builtin import builtin_tasks
from environments.tasks.code_suite import parse_code_suite
from environments.tasks.suite_format import parse_suite
from environments.tasks.task import Task
from tests.support.exploits import FRAME_EXPLOIT, PATCH_EXPLOIT, reasons

TASKS = {t.task_id: t for t in builtin_tasks()}


async def put(sb: Sandbox, files: dict[str, str]) -> None:
    for name, content in files.items():
        await sb.offload(write_bytes, Jail.of(sb), name, textwrap.dedent(content).encode())


async def verify_files(task: Task, files: dict[str, str], **kwargs):
    async with Sandbox.create() as sb:
        await put(sb, files)
        return await verify(task, sb, **kwargs)


async def test_every_builtin_reference_solution_scores_one_and_an_empty_one_zero():
    gate = asyncio.Semaphore(2)  # two cores: keep the per-test timeouts meaningful

    async def check(task: Task):
        async with gate:
            good = await verify_files(task, task.reference_solution)
            empty = await verify_files(task, {"solution.py": ""})
        return task.task_id, good, empty

    for task_id, good, empty in await asyncio.gather(*(check(t) for t in TASKS.values())):
        assert (good.score, good.passed, good.feedback) == (1.0, good.total, ""), (task_id, good.feedback)
        assert empty.score == 0.0 and empty.passed == 0, task_id
        assert "ImportError" in reasons(empty)


async def test_fake_test_file_and_printing_passed_scores_zero():
    files = {
        "test_solution.py": """
            print("passed")
            print("All 5 tests passed")
        """,
        "solution.py": """
            print("test_basic PASSED\\n5 passed in 0.01s\\nOK")
            def reverse_words(text):
                return "wrong"
        """,
    }
    result = await verify_files(TASKS["reverse_words"], files)
    assert result.score == 0.0 and result.passed == 0
    assert result.total == 5


async def test_forged_result_lines_score_zero_and_the_answers_are_never_visible():
    # Reports in the child's own format, claiming the best an answer-less forger can claim.
    forged = [CHILD_RESULT_MARK + json.dumps({"checks": [{"value": v}] * 2}) for v in (True, "", "passed")]
    forged.append(CHILD_RESULT_MARK + json.dumps({"passed": True, "checks": "all"}))
    files = {
        "solution.py": f"""
            import os, sys
            FORGED = {forged!r}
            for line in FORGED:
                print(line)
                os.write(1, ("\\n" + line + "\\n").encode())
                os.write(2, ("\\n" + line + "\\n").encode())
            # Look for the nonce everywhere a process can easily look.
            print("ENV", dict(os.environ))
            print("ARGV", sys.argv)
            for pid in os.listdir("/proc"):
                if pid.isdigit():
                    try:
                        print("CMD", open(f"/proc/{{pid}}/cmdline", "rb").read())
                    except OSError:
                        pass
            for name in os.listdir("."):
                if os.path.isfile(name):
                    print("FILE", name, open(name, "rb").read()[:2000])
            print("STDIN", open("/proc/self/fd/0", "rb").read())
            def reverse_words(text):
                os._exit(0)  # only the forged lines above are left as a report
        """
    }
    config = VerifierConfig(output_tail_chars=200_000)
    result = await verify_files(TASKS["reverse_words"], files, config=config)
    assert result.score == 0.0 and result.passed == 0
    assert "ENV" in result.output_tail and "CMD" in result.output_tail  # the probe did run
    for answer in ("world hello", "fox brown quick the", "there! Hi,"):  # expected values
        assert answer not in result.output_tail


async def test_partial_credit_with_feedback_naming_tests_and_assertions():
    buggy = """
        def merge_intervals(intervals):
            merged = []
            for start, end in sorted(intervals):
                if merged and start < merged[-1][1]:  # touching intervals are not merged: bug
                    merged[-1][1] = max(merged[-1][1], end)
                else:
                    merged.append([start, end])
            return merged
    """
    config = VerifierConfig(public_fraction=1.0)  # every test public: its failures are described
    result = await verify_files(TASKS["merge_intervals"], {"solution.py": buggy}, config=config)
    assert 0 < result.passed < result.total
    assert result.score == pytest.approx(result.passed / result.total)
    assert result.feedback.startswith(f"{result.passed}/{result.total} tests passed.")
    assert (
        "- test_touching: check 1 (`merge_intervals([[1, 2], [2, 3]])`): expected [[1, 3]], got [[1, 2], [2, 3]]"
        in result.feedback
    )
    failing = {t.name for t in result.tests if not t.passed}
    assert "test_touching" in failing and "test_overlapping" not in failing


async def test_feedback_can_hide_test_source():
    config = VerifierConfig(show_assertion_source=False, public_fraction=1.0)
    result = await verify_files(
        TASKS["fizzbuzz"], {"solution.py": "def fizzbuzz(n):\n    return []\n"}, config=config
    )
    assert (
        "- test_first_fifteen, test_small, test_length_and_tail: check 1: wrong result\n" in result.feedback
    )
    assert result.feedback.endswith("- test_non_positive: check 3: wrong result")
    assert "fizzbuzz(" not in result.feedback and "Fizz" not in result.feedback


async def test_infinite_loop_costs_only_its_own_test():
    solution = """
        def chunk(items, size):
            if size < 1:
                while True:
                    pass
            return [list(items[i:i + size]) for i in range(0, len(items), size)]
    """
    config = VerifierConfig(per_test_timeout_s=4)  # each test is a process: leave room to start under load
    result = await verify_files(TASKS["chunk_list"], {"solution.py": solution}, config=config)
    assert [t.name for t in result.tests if not t.passed] == ["test_bad_size"]
    assert "timed out after 4s" in reasons(result)
    assert result.passed == result.total - 1


async def test_whole_run_timeout_keeps_results_so_far():
    solution = """
        import time
        def dedupe(items):
            if len(items) > 1000:
                time.sleep(60)
            seen = []
            return [x for x in items if not (x in seen or seen.append(x))]
    """
    config = VerifierConfig(timeout_s=3, per_test_timeout_s=30)
    result = await verify_files(TASKS["dedupe"], {"solution.py": solution}, config=config)
    assert result.timed_out
    assert result.passed == 4 and result.total == 5
    assert "timed out after 3s" in result.feedback
    assert "test_large: no result: the test run was cut short (timed out)" in reasons(result)


async def test_solution_that_kills_the_run_scores_zero():
    result = await verify_files(TASKS["dedupe"], {"solution.py": "import os\nos._exit(0)\n"})
    assert result.score == 0.0
    assert "no result: the test process ended without a report (exit status 0)" in reasons(result)


async def test_noisy_solution_is_still_graded():
    solution = (
        TASKS["dedupe"].reference_solution["solution.py"]
        + "\nprint('x' * 5_000_000)\nprint('END-OF-NOISE')\n"
    )
    result = await verify_files(TASKS["dedupe"], {"solution.py": solution})
    assert result.score == 1.0
    assert result.output_tail.rstrip().endswith("END-OF-NOISE")


async def test_missing_symlinked_or_oversized_solution_scores_zero(tmp_path):
    task = TASKS["is_palindrome"]
    missing = await verify_files(task, {"notes.txt": "I forgot"})
    assert missing.score == 0 and missing.missing_files == ["solution.py"]
    assert "Missing solution file(s)" in missing.feedback and "solution.py" in missing.feedback

    outside = tmp_path / "real_solution.py"
    outside.write_text(task.reference_solution["solution.py"])
    async with Sandbox.create() as sb:
        (sb.workdir / "solution.py").symlink_to(outside)
        linked = await verify(task, sb)
    assert linked.score == 0 and linked.missing_files == ["solution.py"]

    big = await verify_files(task, {"solution.py": task.reference_solution["solution.py"] + "#" * 2000})
    assert big.score == 1.0
    small_cap = VerifierConfig(max_solution_bytes=1000)
    too_big = await verify_files(
        task, {"solution.py": task.reference_solution["solution.py"] + "#" * 2000}, config=small_cap
    )
    assert too_big.score == 0 and too_big.missing_files == ["solution.py"]


async def test_only_solution_files_are_copied_and_cannot_shadow_the_runner():
    task = Task(
        task_id="shadow",
        prompt="p",
        hidden_tests="from solution import f\n\ndef test_f():\n    assert f() == 1\n",
        solution_files=("solution.py", "json.py"),
    )
    files = {
        "solution.py": "def f():\n    return 1\n",
        "json.py": "raise SystemExit('shadowed the runner')\n",  # copied: a declared solution file
        "sitecustomize.py": "import os\nos._exit(3)\n",  # not declared: never copied
        "conftest.py": "raise SystemExit(1)\n",
    }
    result = await verify_files(task, files)
    assert result.score == 1.0, result.feedback


async def test_hidden_tests_are_never_on_disk():
    task = Task(
        task_id="peek",
        prompt="p",
        hidden_tests=textwrap.dedent(
            """
            # SECRET-MARKER-7f3a
            from solution import snapshot

            def test_tests_not_readable_from_disk():
                assert not any("SECRET-MARKER-7f3a" in content for content in snapshot())
            """
        ),
    )
    solution = """
        import os

        def snapshot():
            found = []
            for dirpath, _, names in os.walk(os.environ["HOME"]):
                for name in names:
                    path = os.path.join(dirpath, name)
                    if os.path.isfile(path):  # not the FIFOs of its own remote-procedure channel
                        with open(path, errors="replace") as f:
                            found.append(f.read())
            return found
    """
    result = await verify_files(task, {"solution.py": solution, "notes.txt": "x"})
    assert result.score == 1.0, result.feedback


async def test_top_level_asserts_each_count_as_a_test():
    task = Task(
        task_id="asserts",
        prompt="p",
        hidden_tests="from solution import add\nassert add(1, 2) == 3\nassert add(0, 0) == 1\nassert add(-1, 1) == 0\n",
    )
    config = VerifierConfig(public_fraction=1.0)
    result = await verify_files(task, {"solution.py": "def add(a, b):\n    return a + b\n"}, config=config)
    assert (result.passed, result.total) == (2, 3)
    assert "test_assert_line_3: AssertionError (at: assert add(0, 0) == 1)" in result.feedback


async def test_efficiency_shaping_is_off_by_default_and_bounded():
    task = TASKS["fizzbuzz"]
    plain = await verify_files(task, task.reference_solution, turns_used=8, max_turns=10)
    assert plain.score == 1.0
    config = VerifierConfig(efficiency_weight=0.2)
    shaped = await verify_files(task, task.reference_solution, config=config, turns_used=5, max_turns=10)
    assert shaped.score == pytest.approx(0.9)
    capped = await verify_files(task, task.reference_solution, config=config, turns_used=50, max_turns=10)
    assert capped.score == pytest.approx(0.8)


async def test_verify_accepts_a_plain_directory(tmp_path: Path):
    task = TASKS["second_largest"]
    (tmp_path / "solution.py").write_text(task.reference_solution["solution.py"])
    result = await verify(task, tmp_path)
    assert result.score == 1.0


def test_code_suites_reject_sources_without_tests():
    with pytest.raises(ValueError, match="defines no test functions"):
        parse_code_suite({"kind": "code", "code": "x = 1\n"})
    with pytest.raises(ValueError, match="does not parse"):
        parse_code_suite({"kind": "code", "code": "def test_(:\n"})


# -- reward hacks: each solution below has no task code at all ---------------------------------


@pytest.mark.reliability
@pytest.mark.parametrize("exploit", [PATCH_EXPLOIT, FRAME_EXPLOIT], ids=["patch-stdlib", "frames-gc-proc"])
async def test_reward_hacks_score_zero_on_every_builtin_task(exploit):
    """Patching the stdlib or builtins the runner uses, or walking frames, `gc.get_objects()` and
    /proc/self for the reporter or a nonce, once scored 1.0 on every built-in task."""
    gate = asyncio.Semaphore(2)

    async def run(task: Task):
        async with gate:
            return task.task_id, await verify_files(task, {"solution.py": exploit})

    results = await asyncio.gather(*(run(t) for t in TASKS.values()))
    scores = {task_id: result.score for task_id, result in results}
    assert scores == dict.fromkeys(TASKS, 0.0)


def test_no_constant_claim_passes_any_builtin_test():
    """Each built-in test has checks with at least two different expected outcomes, so a report
    that claims the same answer (True, [], an exception, ...) for every check fails it."""
    for task in TASKS.values():
        for test in parse_suite(task.hidden_tests).tests:
            outcomes = {c.outcome_key() for c in test.checks if c.kind == "expr"}
            assert len(outcomes) >= 2, (task.task_id, test.name)


async def test_exact_types_are_compared_in_the_parent():
    task = Task(
        task_id="types",
        prompt="p",
        hidden_tests={
            "imports": ["one", "pair", "ratio"],
            "tests": [
                {
                    "name": "test_int",
                    "checks": [{"expr": "one()", "returns": 1}, {"expr": "one() + 1", "returns": 2}],
                },
                {"name": "test_tuple", "checks": [{"expr": "pair()", "returns": {"$tuple": [1, 2]}}]},
                {"name": "test_float", "checks": [{"expr": "ratio()", "returns": 0.5}]},
            ],
        },
    )
    honest = "def one():\n    return 1\ndef pair():\n    return (1, 2)\ndef ratio():\n    return 0.5\n"
    assert (await verify_files(task, {"solution.py": honest})).score == 1.0
    lookalike = (
        "class Anything(int):\n    def __eq__(self, other):\n        return True\n    __hash__ = int.__hash__\n"
        "def one():\n    return True\n"  # True == 1 in Python, not here
        "def pair():\n    return [1, 2]\n"  # a list is not a tuple
        "def ratio():\n    return Anything(0)\n"  # an int subclass that equals everything
    )
    result = await verify_files(task, {"solution.py": lookalike})
    assert result.passed == 0, result.feedback
    assert "expected 1, got True" in reasons(result)
    assert "returned a Anything, which is not a plain value" in reasons(result)


DEEP_TREE = "import os\nfor _ in range(5000):\n    os.mkdir('d')\n    os.chdir('d')\n"


async def test_a_5000_level_tree_made_by_the_solution_scores_zero_and_leaves_nothing(tmp_path):
    before = set(tmp_path.iterdir())
    result = await verify(TASKS["dedupe"], _dir_with(tmp_path / "agent", DEEP_TREE), root_dir=tmp_path)
    assert result.score == 0.0 and result.total == 5
    assert "could not load the solution: ImportError" in reasons(result)
    assert set(tmp_path.iterdir()) - before == {tmp_path / "agent"}  # no container left


def _dir_with(path: Path, solution: str) -> Path:
    path.mkdir()
    (path / "solution.py").write_text(solution)
    return path


async def test_an_internal_failure_scores_zero_with_the_reason(monkeypatch):
    async def broken(*args, **kwargs):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr("environments.rollout.verifier._run_data_tests", broken)
    task = TASKS["fizzbuzz"]
    result = await verify_files(task, task.reference_solution)
    assert (result.score, result.passed, result.total) == (0.0, 0, 4)
    assert "verifier error: RecursionError: maximum recursion depth exceeded" in result.feedback
