"""Seven attacks on a rollout's neighbours (issue 21), each with real sandboxes and the real verifier:

1. a CPU flood of new sessions (autogroup) in two neighbour sandboxes must not lower an honest score;
2. a forged report of 40,000 integers of one hash must not freeze the env's event loop;
3. forking must not escape a test's CPU budget (nor a slow event loop, nor an exit between polls);
4. an exception message that lists every answer must not pass a message check;
5. a sandbox's processes together must stay under its memory limit;
6. two env processes must never run sandboxes under the same uid;
7. `unshare -U` must fail inside the sandbox.

Each failed on the code before the fix (see the commit that added this file).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from environments.rollout.sandbox import cgroup as cgroup_module
from environments.rollout.sandbox.cgroup import detect_cgroups
from environments.rollout.sandbox.isolation import detect_isolation
from environments.rollout.sandbox.limits import SandboxLimits
from environments.rollout.sandbox.process_tree import pids_of_uid
from environments.rollout.sandbox.sandbox import Sandbox
from environments.rollout.tools import Jail, write_bytes
from environments.rollout.verifier import verify
from environments.tasks.builtin import builtin_tasks
from environments.tasks.suite_child import RESULT_MARK
from environments.tasks.task import Task

pytestmark = [
    pytest.mark.reliability,
    pytest.mark.skipif(os.geteuid() != 0, reason="these tests need root to drop privileges"),
]
TASKS = {t.task_id: t for t in builtin_tasks()}
CGROUPS = detect_cgroups()
needs_cgroups = pytest.mark.skipif(CGROUPS is None, reason="no usable cgroup tree on this machine")


async def verify_files(task: Task, files: dict[str, str], **kwargs):
    async with Sandbox.create() as sb:
        for name, content in files.items():
            await sb.offload(write_bytes, Jail.of(sb), name, textwrap.dedent(content).encode())
        return await verify(task, sb, **kwargs)


# 1. ----------------------------------------------------------------------------------------------

SESSION_FLOOD = "for i in $(seq 60); do setsid sh -c 'while :; do :; done' & done; sleep 100"


@needs_cgroups
async def test_an_honest_score_is_unchanged_while_two_neighbours_flood_the_cpu_with_sessions():
    task = TASKS["lru_cache"]
    limits = SandboxLimits(user="per_sandbox", command_timeout_s=120)
    async with Sandbox.create(limits) as left, Sandbox.create(limits) as right:
        floods = [asyncio.create_task(sb.run(SESSION_FLOOD)) for sb in (left, right)]
        try:
            for _ in range(200):  # until the 120 spinning sessions are up
                busy = [len(pids_of_uid(sb.uid)) for sb in (left, right)]
                if min(busy) >= 60:
                    break
                await asyncio.sleep(0.1)
            assert min(busy) >= 60, busy
            honest = await verify_files(task, task.reference_solution)
        finally:
            for flood in floods:
                flood.cancel()
            await asyncio.gather(*floods, return_exceptions=True)
    assert (honest.score, honest.feedback) == (1.0, ""), honest.feedback


# 2. ----------------------------------------------------------------------------------------------

COLLIDING = 40_000  # all of one hash: i * (2**61 - 1) hashes to 0


async def test_a_hash_flood_report_never_pauses_the_event_loop():
    suite = {"tests": [{"name": "test_set", "checks": [{"expr": "members()", "returns": {"$set": [1, 2]}}]}]}
    task = Task(task_id="hash_flood", prompt="members", hidden_tests=suite)
    forged = (
        "\n"
        + RESULT_MARK
        + '{"test": 0, "checks": [{"value": {"$set": ['
        + ",".join(str(i * (2**61 - 1)) for i in range(1, COLLIDING + 1))
        + "]}}]}\n"
    )
    assert len(forged) < 1_000_000  # within the verifier's own output bound: the report arrives whole
    solution = f"""
        import os
        line = {forged!r}.encode()
        for fd in (3, 4, 5, 1):
            try:
                os.write(fd, line)
            except OSError:
                pass
        os._exit(0)
    """
    loop = asyncio.get_running_loop()
    stalls: list[float] = []
    busy_stalls: list[float] = []
    done = asyncio.Event()

    async def ticker() -> None:
        # A pause is the wall time between ticks beyond the 10 ms asked for. On a shared machine the
        # scheduler alone can pause any process; a pause this process spent COMPUTING (its CPU time
        # grew as much) is one the env caused itself: that is what must stay under 100 ms.
        last, last_cpu = loop.time(), time.process_time()
        while not done.is_set():
            await asyncio.sleep(0.01)
            now, cpu = loop.time(), time.process_time()
            stalls.append(now - last - 0.01)
            busy_stalls.append(min(now - last - 0.01, cpu - last_cpu))
            last, last_cpu = now, cpu

    ticking = asyncio.create_task(ticker())
    started = time.monotonic()
    try:
        result = await verify_files(task, {"solution.py": solution})
    finally:
        done.set()
        await ticking
    took = time.monotonic() - started
    print(f"longest pause {max(stalls):.3f}s, longest busy pause {max(busy_stalls):.3f}s, verify {took:.1f}s")
    assert max(busy_stalls) < 0.1, f"event loop busy for {max(busy_stalls):.3f}s (verify took {took:.1f}s)"
    assert result.score == 0.0
    assert "share one hash value" in result.tests[0].message, result.tests[0].message


# 3. ----------------------------------------------------------------------------------------------


def _work_value(n: int) -> int:
    """sum(i * i % 7 for i in range(n)), in closed form (the pattern repeats every 7)."""
    pattern = [i * i % 7 for i in range(7)]
    return (n // 7) * sum(pattern) + sum(pattern[: n % 7])


WORK_N = 48_000_000  # about 2 s of CPU on a quiet core (24M took 1.02 s: at the budget), far under the 10 s wall clock
BUDGET_SUITE = {
    "imports": ["work"],
    "tests": [
        {"name": "test_small", "checks": [{"expr": "work(1000)", "returns": _work_value(1000)}]},
        {
            "name": "test_budget",
            "cpu_s": 1,
            "checks": [{"expr": f"work({WORK_N})", "returns": _work_value(WORK_N)}],
        },
    ],
}
HONEST_WORK = """
    def work(n):
        return sum(i * i % 7 for i in range(n))
"""
FORKING_WORK = """
    import os

    def _chunk(lo, hi):
        return sum(i * i % 7 for i in range(lo, hi))

    def work(n):
        # Each chunk in a fresh child: a per-process CPU limit starts again at zero in each.
        total, step = 0, 1_000_000
        for lo in range(0, n, step):
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(r)
                os.write(w, str(_chunk(lo, min(n, lo + step))).encode())
                os._exit(0)
            os.close(w)
            data = b""
            while part := os.read(r, 64):
                data += part
            os.close(r)
            os.waitpid(pid, 0)
            total += int(data)
        return total
"""


@needs_cgroups
async def test_forking_scores_what_the_honest_solution_scores_under_a_cpu_budget():
    task = Task(task_id="cpu_budget", prompt="work", hidden_tests=BUDGET_SUITE)
    honest = await verify_files(task, {"solution.py": HONEST_WORK})
    forking = await verify_files(task, {"solution.py": FORKING_WORK})
    assert [t.passed for t in honest.tests] == [True, False], honest.feedback
    assert [t.passed for t in forking.tests] == [True, False], forking.feedback
    assert forking.score == honest.score == 0.5
    assert "all its processes together" in forking.tests[1].message, forking.tests[1].message


SPIN_TWICE = "for i in 1 2; do (i=0; while [ $i -lt 2000000 ]; do i=$((i+1)); done) & done; wait"


@needs_cgroups
async def test_the_cpu_budget_holds_when_the_env_loop_is_slow_to_come_back(monkeypatch):
    """The budget's baseline is read before the command starts. Read after, a busy event loop (held
    here for 3 s right after the start) let the command's first CPU seconds go uncounted."""
    original = Sandbox._start

    async def slow_start(self, *args, **kwargs):
        running = await original(self, *args, **kwargs)
        time.sleep(3)  # the env's loop is busy elsewhere; the command runs meanwhile
        return running

    monkeypatch.setattr(Sandbox, "_start", slow_start)
    async with Sandbox.create(SandboxLimits(command_timeout_s=30)) as sb:
        # Two forks, each stopped by its own 1 s RLIMIT_CPU: 2 s together, over the 1 s budget.
        spent = await sb.run(SPIN_TWICE, cpu_time_s=1)
    assert spent.cpu_exceeded and spent.exit_code == 137, spent


@needs_cgroups
async def test_a_command_that_ends_between_two_polls_is_judged_on_its_exact_total(monkeypatch):
    """The watcher polls; a command over budget that exits before the next poll is still over it."""
    monkeypatch.setattr(cgroup_module, "_CPU_POLL_S", 3600.0)  # one look at the start, then none
    task = Task(task_id="cpu_budget", prompt="work", hidden_tests=BUDGET_SUITE)
    forking = await verify_files(task, {"solution.py": FORKING_WORK})
    assert [t.passed for t in forking.tests] == [True, False], forking.feedback
    assert "all its processes together" in forking.tests[1].message, forking.tests[1].message
    async with Sandbox.create(SandboxLimits(command_timeout_s=30)) as sb:
        spent = await sb.run(SPIN_TWICE, cpu_time_s=1)
    assert spent.cpu_exceeded and spent.exit_code == 137, spent


# 4. ----------------------------------------------------------------------------------------------

SHOTGUN = {
    "tokenizer": """
        def tokenize(source):
            raise ValueError("bad input: " + ", ".join(f"position {i}" for i in range(len(source) + 2)))
    """,
    "topological_sort": """
        def topo_sort(dependencies):
            names = sorted(set(dependencies) | {d for ds in dependencies.values() for d in ds})
            if any(dependencies.values()) and len(names) < 3:
                raise ValueError("cycle exists")
            raise ValueError("a cycle among: " + " ".join(names))
    """,
}


def _message_checks_only(task: Task) -> Task:
    """The task's checks of an exception's message, each as a test of its own."""
    suite = dict(task.hidden_tests)
    tests = []
    for test in suite["tests"]:
        for j, check in enumerate(test["checks"]):
            if "message_match" in check or "message_contains" in check:
                tests.append(
                    {"name": f"{test['name']}_{j}", "setup": test.get("setup", ""), "checks": [check]}
                )
    suite["tests"] = tests
    return Task(task_id=f"{task.task_id}_messages", prompt=task.prompt, hidden_tests=suite)


@pytest.mark.parametrize("task_id", sorted(SHOTGUN))
async def test_a_message_shotgun_passes_no_message_check(task_id):
    task = _message_checks_only(TASKS[task_id])
    assert len(task.hidden_tests["tests"]) >= 2
    result = await verify_files(task, {"solution.py": SHOTGUN[task_id]})
    assert result.passed == 0, [(t.name, t.passed) for t in result.tests]
    assert all("states the right value" in t.message for t in result.tests), result.feedback
    honest = await verify_files(task, TASKS[task_id].reference_solution)
    assert honest.score == 1.0, honest.feedback


# 5. ----------------------------------------------------------------------------------------------

HOG = "python3 -c 'import time; b = bytearray(150 << 20); b[::4096] = b\"x\" * len(b[::4096]); time.sleep(4)'"


def _anon_resident_bytes(uid: int) -> int:
    total = 0
    for pid in pids_of_uid(uid):
        with contextlib.suppress(OSError, ValueError, IndexError):
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("RssAnon:"):
                    total += int(line.split()[1]) * 1024
    return total


@needs_cgroups
async def test_a_sandbox_total_resident_memory_stays_under_its_limit():
    limit_mb = 256
    limits = SandboxLimits(user="per_sandbox", memory_total_mb=limit_mb, command_timeout_s=30)
    async with Sandbox.create(limits) as sb:
        running = asyncio.create_task(sb.run(f"for i in 1 2 3 4; do {HOG} & done; wait; echo done"))
        peak = 0
        while not running.done():
            peak = max(peak, _anon_resident_bytes(sb.uid))
            await asyncio.sleep(0.02)
        result = await running
        group_peak = sb.cgroup.memory_peak_bytes() if sb.cgroup else None
    assert result.output.strip().endswith("done"), result.output
    assert 0 < peak <= limit_mb << 20, f"{peak / 2**20:.0f} MiB resident, limit {limit_mb} MiB"
    if group_peak is not None:
        assert group_peak <= limit_mb << 20


# 6. ----------------------------------------------------------------------------------------------

ENV_PROCESS = """
import asyncio, sys
from environments.rollout.sandbox.sandbox import Sandbox
from environments.rollout.sandbox.limits import SandboxLimits

async def main():
    limits = SandboxLimits(user="per_sandbox", per_sandbox_uid_base=2_000_000, per_sandbox_uid_count=4)
    async with Sandbox.create(limits) as a, Sandbox.create(limits) as b:
        print(a.uid, b.uid, flush=True)
        await asyncio.to_thread(sys.stdin.read)  # hold both until the test has seen both processes

asyncio.run(main())
"""


async def test_two_env_processes_never_share_a_sandbox_uid():
    # Two processes take two uids each from a range of four: only disjoint draws are allowed.
    for _ in range(3):
        envs = [
            subprocess.Popen(
                [sys.executable, "-c", ENV_PROCESS],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                cwd=Path(__file__).resolve().parents[2],
            )
            for _ in range(2)
        ]
        try:
            uids = [set(map(int, env.stdout.readline().split())) for env in envs]
        finally:
            for env in envs:
                env.communicate("", timeout=60)
        assert all(len(u) == 2 for u in uids), uids
        assert not uids[0] & uids[1], uids


# 7. ----------------------------------------------------------------------------------------------


@pytest.mark.skipif(not detect_isolation(False).drop_privileges, reason="needs the root sandbox")
@pytest.mark.parametrize("builder", ["bwrap", "shell"])
async def test_user_namespaces_cannot_be_made_inside_the_sandbox(builder):
    probe = (
        "unshare -U true; echo rc=$?; unshare -Ur true; echo rc=$?; "
        'python3 -c \'import ctypes; print("unshare", ctypes.CDLL(None, use_errno=True).unshare(0x10000000), '
        "ctypes.get_errno())'"
    )
    async with Sandbox.create(SandboxLimits(root_builder=builder)) as sb:
        result = await sb.run(probe)
    lines = result.output.splitlines()
    assert "rc=1" in lines and lines.count("rc=1") == 2, result.output
    assert "unshare -1 1" in lines, result.output  # EPERM
    assert "Operation not permitted" in result.output
