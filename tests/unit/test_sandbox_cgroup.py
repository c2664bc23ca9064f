"""The sandbox's cgroup: found on v1 and v2, limits written, every process of a command inside it
(no escape), CPU time counted across forks, and everything removed at close."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from environments.rollout.sandbox.cgroup import CgroupTree, _detect, _mounts, _own_paths, detect_cgroups
from environments.rollout.sandbox.limits import SandboxLimits
from environments.rollout.sandbox.process_tree import pids_of_uid
from environments.rollout.sandbox.sandbox import Sandbox
from environments.rollout.sandbox.seccomp import CLONE_NEWUSER, filter_program

HYBRID_MOUNTINFO = """\
25 24 0:22 / /sys/fs/cgroup rw - tmpfs tmpfs rw,mode=755
26 25 0:23 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
27 25 0:24 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
28 25 0:25 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
29 25 0:26 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
30 25 0:27 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""
HYBRID_CGROUP = "8:pids:/\n4:memory:/jobs/42\n2:cpuacct:/\n1:cpu:/\n0::/\n"


def test_mountinfo_and_proc_cgroup_are_read_for_both_versions():
    mounts = _mounts(HYBRID_MOUNTINFO)
    assert [(m, kind) for m, kind, _ in mounts] == [
        ("/sys/fs/cgroup/cpu", "cgroup"),
        ("/sys/fs/cgroup/cpuacct", "cgroup"),
        ("/sys/fs/cgroup/memory", "cgroup"),
        ("/sys/fs/cgroup/pids", "cgroup"),
        ("/sys/fs/cgroup/unified", "cgroup2"),
    ]
    assert "memory" in mounts[2][2]
    paths = _own_paths(HYBRID_CGROUP)
    assert paths == {"pids": "/", "memory": "/jobs/42", "cpuacct": "/", "cpu": "/", "": "/"}
    assert _own_paths("0::/user.slice/app.scope\n") == {"": "/user.slice/app.scope"}
    assert _own_paths("3:cpu,cpuacct:/a\n") == {"cpu": "/a", "cpuacct": "/a"}


def test_no_cgroup_mounts_means_no_tree(tmp_path):
    assert _detect("", "0::/\n", "auto") is None
    assert detect_cgroups("off") is None


root_only = pytest.mark.skipif(os.geteuid() != 0, reason="making cgroups needs root here")


def _tree(version: int) -> CgroupTree | None:
    tree = detect_cgroups(f"v{version}")
    return tree if tree is not None and tree.version == version else None


@root_only
@pytest.mark.parametrize(("version", "builder"), [(1, "bwrap"), (2, "bwrap"), (1, "shell")])
async def test_every_process_of_a_command_is_in_the_group_and_forks_count_against_the_budget(
    version, builder
):
    if _tree(version) is None:
        pytest.skip(f"no writable cgroup v{version} here")
    limits = SandboxLimits(
        user="per_sandbox", cgroup=f"v{version}", command_timeout_s=20, root_builder=builder
    )
    async with Sandbox.create(limits) as sb:
        group = sb.cgroup
        assert group is not None and group.tree.version == version
        # New sessions, double forks and a child that outlives its parent: all stay in the group.
        command = "setsid sh -c 'sleep 30 & sleep 30' & (sleep 30 &) ; sleep 30"
        running = asyncio.create_task(sb.run(command))
        for _ in range(100):
            mine = pids_of_uid(sb.uid)
            if len(mine) >= 5:
                break
            await asyncio.sleep(0.05)
        assert len(mine) >= 5 and set(mine) <= set(group.pids()), (mine, group.pids())
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
        # Nor can a command write itself elsewhere: there is no cgroupfs in its root.
        escape = await sb.run("echo $$ > /sys/fs/cgroup/cgroup.procs; echo rc=$?; ls /sys 2>&1 | head -1")
        assert "rc=1" in escape.output and "No such file or directory" in escape.output
        before = group.cpu_seconds()
        spin = "for i in 1 2 3; do (while :; do :; done) & done; wait"
        result = await sb.run(spin, cpu_time_s=1)
        used = group.cpu_seconds() - before
    assert result.cpu_exceeded and result.exit_code == 137, result
    assert 1.0 <= used < 3.0, used  # three forks together, stopped soon after the 1 s budget
    assert not any(Path(d).exists() for d in group.dirs.values())  # removed at close


@root_only
async def test_the_limits_are_written_to_the_group():
    tree = _tree(1)
    if tree is None or set(tree.controllers) != {"cpu", "cpuacct", "memory", "pids"}:
        pytest.skip("needs cgroup v1 with cpu, cpuacct, memory and pids")
    limits = SandboxLimits(cgroup="v1", cpu_cores=0.5, cpu_weight=50, memory_total_mb=300, max_processes=20)
    async with Sandbox.create(limits) as sb:
        dirs = sb.cgroup.dirs
        read = lambda c, f: (dirs[c] / f).read_text().strip()  # noqa: E731
        assert read("cpu", "cpu.cfs_quota_us") == "50000" and read("cpu", "cpu.cfs_period_us") == "100000"
        assert read("cpu", "cpu.shares") == "512"
        assert read("memory", "memory.limit_in_bytes") == str(300 << 20)
        assert read("pids", "pids.max") == "22"


def test_the_seccomp_filter_jumps_stay_inside_the_program():
    for machine in ("x86_64", "aarch64"):
        program = filter_program(machine)
        for at, (code, jt, jf, _k) in enumerate(program):
            if code & 0x07 == 0x05:  # a jump
                assert at + 1 + jt < len(program) and at + 1 + jf < len(program)
        assert program[-2][3] == 0x00050000 | 1 and program[-1][3] == 0x00050000 | 38  # EPERM, ENOSYS
        assert any(k == CLONE_NEWUSER for _, _, _, k in program)
