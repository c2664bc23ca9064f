"""A control group per sandbox: its CPU share and quota, its total memory, its process count, and
the CPU time of every process it ever ran, forks included.

- `detect_cgroups` finds, once per process, a cgroup tree this process may write: cgroup v2 (a
  delegated subtree, or the root) or cgroup v1 (the `cpu`, `cpuacct`, `memory` and `pids`
  hierarchies, each where this process already sits). When neither is usable it says so once,
  loudly, and sandboxes run without one (per-process rlimits only, see docs/sandbox.md).
- `SandboxCgroup.create` makes the sandbox's own group (`hermes-sbx-<env pid>-<n>`) and writes
  its limits; `enter_fds` are descriptors of its `cgroup.procs` files, which each command's
  forked child writes itself into before it execs (see `make_preexec` in
  environments/rollout/sandbox/isolation.py), so nothing the command starts runs outside it.
- Commands cannot leave: the files are root's, commands run as an unprivileged uid, in their own
  cgroup namespace, and the allow-list root has no /sys at all.
- `cpu_seconds` is the group's CPU time (user + system, all processes, dead ones included), which
  `watch_cpu` compares with a command's CPU budget; `close` kills what is left and removes the
  group. Groups left by a killed env are removed at the next start (`reap_stale_groups`).
- `sandbox_cgroup_for(limits)` is what `Sandbox.open` calls (in a worker thread).

File operations on cgroupfs only; no subprocesses.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import itertools
import logging
import os
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from environments.rollout.sandbox.limits import SandboxError, SandboxLimits
from hermes_opd.runtime.processes import pid_alive

log = logging.getLogger("environments.rollout.sandbox.sandbox")

GROUP_PREFIX = "hermes-sbx-"
ENV_LEAF = "hermes-opd-env"
"""cgroup v2: the leaf this process moves into when its own group must delegate controllers
(a cgroup with controllers enabled for its children may hold no processes itself)."""
_V1_CONTROLLERS = ("cpu", "cpuacct", "memory", "pids")
_V2_CONTROLLERS = ("cpu", "memory", "pids")
_CFS_PERIOD_US = 100_000
_counter = itertools.count()


@dataclass(frozen=True)
class CgroupTree:
    """Where this process makes sandbox groups (detected once, see `detect_cgroups`)."""

    version: int
    """1 or 2."""
    parents: tuple[tuple[str, str], ...]
    """(controller, directory under which sandbox groups are made). v2: one entry, "unified"."""
    controllers: tuple[str, ...]
    """What is enforced: a subset of cpu, cpuacct (v1 CPU accounting), memory, pids."""

    def parent(self, controller: str) -> Path | None:
        return next((Path(d) for c, d in self.parents if c == controller), None)

    def describe(self) -> str:
        return f"cgroup v{self.version} ({', '.join(self.controllers) or 'membership and CPU time only'})"


# ---------------------------------------------------------------------------------------------
# Detection.


def _mounts(mountinfo: str) -> list[tuple[str, str, set[str]]]:
    """(mount point, fstype, super options) of every cgroup mount in a /proc/self/mountinfo text."""
    found = []
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        found.append((fields[4], tail[0], set(tail[2].split(","))))
    return found


def _own_paths(proc_cgroup: str) -> dict[str, str]:
    """{controller or "" for v2: this process's group path} from a /proc/self/cgroup text."""
    paths: dict[str, str] = {}
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        for controller in parts[1].split(",") if parts[1] else [""]:
            paths[controller] = parts[2]
    return paths


def _read(path: Path) -> str:
    return path.read_text(encoding="ascii").strip()


def _write(path: Path, value: str) -> None:
    with open(path, "w", encoding="ascii") as f:
        f.write(value)


def _probe_writable(directory: Path) -> bool:
    """Can a group be made (and removed) here?"""
    probe = directory / f"{GROUP_PREFIX}probe-{os.getpid()}-{next(_counter)}"
    try:
        probe.mkdir()
    except OSError:
        return False
    with contextlib.suppress(OSError):
        probe.rmdir()
    return True


def _detect_v2(mount: Path, own: str) -> CgroupTree | None:
    """A v2 tree: this process's own group, with the controllers it can delegate to children. If
    the group holds processes (it is not the root), they move into the `ENV_LEAF` child first."""
    base = mount / own.lstrip("/")
    if not _probe_writable(base):
        return None
    available = (
        set(_read(base / "cgroup.controllers").split()) if (base / "cgroup.controllers").exists() else set()
    )
    wanted = [c for c in _V2_CONTROLLERS if c in available]
    enabled = set(_read(base / "cgroup.subtree_control").split())
    missing = [c for c in wanted if c not in enabled]
    if missing and own != "/":
        leaf = base / ENV_LEAF
        with contextlib.suppress(FileExistsError):
            leaf.mkdir()
        try:
            for pid in _read(base / "cgroup.procs").split():
                with contextlib.suppress(ProcessLookupError, OSError):
                    _write(leaf / "cgroup.procs", pid)
        except OSError as exc:
            log.warning("sandbox: could not move this process into %s: %s", leaf, exc)
    for controller in missing:
        try:
            _write(base / "cgroup.subtree_control", f"+{controller}")
        except OSError as exc:
            log.warning("sandbox: cgroup v2 controller %s cannot be delegated here: %s", controller, exc)
    enabled = set(_read(base / "cgroup.subtree_control").split())
    controllers = tuple(c for c in wanted if c in enabled)
    return CgroupTree(2, (("unified", str(base)),), controllers)


def _detect_v1(mounts: list[tuple[str, str, set[str]]], own: dict[str, str]) -> CgroupTree | None:
    parents: list[tuple[str, str]] = []
    for controller in _V1_CONTROLLERS:
        mount = next((m for m, kind, opts in mounts if kind == "cgroup" and controller in opts), None)
        if mount is None or controller not in own:
            continue
        base = Path(mount) / own[controller].lstrip("/")
        if _probe_writable(base):
            parents.append((controller, str(base)))
    if not parents:
        return None
    return CgroupTree(1, tuple(parents), tuple(c for c, _ in parents))


def _detect(mountinfo: str, proc_cgroup: str, prefer: str) -> CgroupTree | None:
    mounts = _mounts(mountinfo)
    own = _own_paths(proc_cgroup)
    v2_mount = next((Path(m) for m, kind, _ in mounts if kind == "cgroup2"), None)
    v2 = functools.partial(_detect_v2, v2_mount, own.get("", "/")) if v2_mount and "" in own else None
    v1 = functools.partial(_detect_v1, mounts, own)
    if prefer == "v1":
        order = [v1]
    elif prefer == "v2":
        order = [v2] if v2 else []
    else:
        # v2 when it carries controllers; else v1 (a hybrid machine binds them to v1); else a
        # controller-less v2 group (membership, CPU time and kill still work).
        order = [v2, v1] if v2 is not None else [v1]
    fallback: CgroupTree | None = None
    for attempt in order:
        if attempt is None:
            continue
        tree = attempt()
        if tree is None:
            continue
        if tree.version == 2 and not tree.controllers and prefer == "auto":
            fallback = fallback or tree
            continue
        return tree
    return fallback


_trees: dict[str, CgroupTree | None] = {}
_tree_lock = threading.Lock()


def detect_cgroups(prefer: str = "auto") -> CgroupTree | None:
    """The cgroup tree sandboxes use here ("auto", "v1", "v2"; "off" gives None); cached. Says
    once, loudly, when there is none."""
    if prefer == "off":
        return None
    with _tree_lock:
        if prefer not in _trees:
            tree = None
            try:
                tree = _detect(
                    Path("/proc/self/mountinfo").read_text(), Path("/proc/self/cgroup").read_text(), prefer
                )
            except OSError as exc:
                log.debug("sandbox: cgroup detection failed: %s", exc)
            if tree is None:
                log.warning(
                    "sandbox: NO CGROUPS (%s): sandboxes share CPU and memory with their neighbours "
                    "without limits; a rollout can starve or exhaust the others, and CPU budgets count "
                    "per process only (forks escape them). Run as root with cgroup v1, or give this "
                    "process a delegated cgroup v2 subtree. See docs/sandbox.md.",
                    prefer,
                )
            else:
                log.info("sandbox: one %s per sandbox", tree.describe())
                for controller in ("cpu", "memory", "pids"):
                    if controller not in tree.controllers:
                        log.warning(
                            "sandbox: the cgroup %s controller is unavailable: that limit is not enforced",
                            controller,
                        )
            _trees[prefer] = tree
        return _trees[prefer]


# ---------------------------------------------------------------------------------------------
# One sandbox's group.


@dataclass(frozen=True)
class CgroupLimits:
    cpu_cores: float
    """CPU quota, in cores (v1 cfs_quota_us, v2 cpu.max)."""
    cpu_weight: int
    """Relative share under contention (v2 cpu.weight 1..10000; v1 cpu.shares = weight * 1024 / 100)."""
    memory_bytes: int
    """All processes of the sandbox together (page cache and tmpfs pages it writes count too)."""
    max_pids: int


class SandboxCgroup:
    """The group of one sandbox, in every hierarchy of `tree`."""

    def __init__(self, tree: CgroupTree, dirs: dict[str, Path]) -> None:
        self.tree = tree
        self.dirs = dirs
        """controller -> this sandbox's group directory ("unified" for v2)."""
        self._enter_fds: list[int] = []

    @classmethod
    def create(cls, tree: CgroupTree, limits: CgroupLimits) -> SandboxCgroup:
        """Make the group and write its limits; OSError when the kernel refuses."""
        name = f"{GROUP_PREFIX}{os.getpid()}-{next(_counter)}"
        dirs: dict[str, Path] = {}
        group = cls(tree, dirs)
        try:
            for controller, parent in tree.parents:
                path = Path(parent) / name
                if path not in dirs.values():  # v1 hierarchies may be co-mounted (cpu,cpuacct)
                    path.mkdir(mode=0o755)
                dirs[controller] = path
            group._apply(limits)
            for path in {p for p in dirs.values()}:
                group._enter_fds.append(os.open(path / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC))
        except BaseException:
            group.close()
            raise
        return group

    def _apply(self, limits: CgroupLimits) -> None:
        quota = max(1000, int(limits.cpu_cores * _CFS_PERIOD_US))
        if self.tree.version == 2:
            d = self.dirs["unified"]
            if "cpu" in self.tree.controllers:
                _write(d / "cpu.weight", str(limits.cpu_weight))
                _write(d / "cpu.max", f"{quota} {_CFS_PERIOD_US}")
            if "memory" in self.tree.controllers:
                _write(d / "memory.max", str(limits.memory_bytes))
                with contextlib.suppress(OSError):
                    _write(d / "memory.swap.max", "0")
                with contextlib.suppress(OSError):
                    _write(d / "memory.oom.group", "1")
            if "pids" in self.tree.controllers:
                _write(d / "pids.max", str(limits.max_pids))
            return
        if "cpu" in self.dirs:
            _write(self.dirs["cpu"] / "cpu.shares", str(max(2, limits.cpu_weight * 1024 // 100)))
            _write(self.dirs["cpu"] / "cpu.cfs_period_us", str(_CFS_PERIOD_US))
            _write(self.dirs["cpu"] / "cpu.cfs_quota_us", str(quota))
        if "memory" in self.dirs:
            _write(self.dirs["memory"] / "memory.limit_in_bytes", str(limits.memory_bytes))
            with contextlib.suppress(OSError):  # only with swap accounting
                _write(self.dirs["memory"] / "memory.memsw.limit_in_bytes", str(limits.memory_bytes))
        if "pids" in self.dirs:
            _write(self.dirs["pids"] / "pids.max", str(limits.max_pids))

    @property
    def enter_fds(self) -> tuple[int, ...]:
        """Open `cgroup.procs` descriptors: a forked child writes "0" to each to join the group."""
        return tuple(self._enter_fds)

    @property
    def procs_files(self) -> list[str]:
        """The group's `cgroup.procs` files (one per hierarchy): writing "0" to one moves the writer."""
        return [str(path / "cgroup.procs") for path in sorted(set(self.dirs.values()))]

    def cpu_seconds(self) -> float | None:
        """CPU time of every process the group ever held (user + system), or None if unknown."""
        try:
            if self.tree.version == 2:
                for line in _read(self.dirs["unified"] / "cpu.stat").splitlines():
                    key, _, value = line.partition(" ")
                    if key == "usage_usec":
                        return int(value) / 1e6
                return None
            if "cpuacct" in self.dirs:
                return int(_read(self.dirs["cpuacct"] / "cpuacct.usage")) / 1e9
        except (OSError, ValueError):
            return None
        return None

    def memory_peak_bytes(self) -> int | None:
        """The most memory the group has held at once, or None if unknown."""
        name = "memory.peak" if self.tree.version == 2 else "memory.max_usage_in_bytes"
        path = self.dirs.get("unified" if self.tree.version == 2 else "memory")
        if path is None:
            return None
        with contextlib.suppress(OSError, ValueError):
            return int(_read(path / name))
        return None

    def pids(self) -> list[int]:
        found: set[int] = set()
        for path in self.dirs.values():
            with contextlib.suppress(OSError, ValueError):
                found.update(int(p) for p in _read(path / "cgroup.procs").split())
        return sorted(found)

    def kill_all(self) -> None:
        """SIGKILL every process in the group (until it is empty, or about a second has passed)."""
        unified = self.dirs.get("unified")
        if unified is not None and (unified / "cgroup.kill").exists():
            with contextlib.suppress(OSError):
                _write(unified / "cgroup.kill", "1")
        for _ in range(100):
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.01)

    def close(self) -> None:
        """Kill what is left and remove the group. Idempotent; never raises."""
        for fd in self._enter_fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._enter_fds.clear()
        if not self.dirs:
            return
        self.kill_all()
        for path in set(self.dirs.values()):
            _remove_group(path)
        self.dirs.clear()


def _remove_group(path: Path) -> None:
    for _ in range(50):
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError as exc:
            if exc.errno != errno.EBUSY:
                log.warning("sandbox: could not remove cgroup %s: %s", path, exc)
                return
            time.sleep(0.02)  # the last processes are still exiting
    log.warning("sandbox: cgroup %s still busy; left in place", path)


def reap_stale_groups(tree: CgroupTree) -> int:
    """Remove groups whose env process is gone (killed before it could close its sandboxes),
    killing what still runs in them. Returns how many were removed."""
    removed = 0
    for _, parent in tree.parents:
        with contextlib.suppress(OSError):
            for entry in os.scandir(parent):
                if not entry.name.startswith(GROUP_PREFIX) or not entry.is_dir(follow_symlinks=False):
                    continue
                owner = entry.name[len(GROUP_PREFIX) :].split("-", 1)[0]
                if not owner.isdigit() or pid_alive(int(owner)):
                    continue
                stale = SandboxCgroup(tree, {"stale": Path(entry.path)})
                stale.kill_all()
                _remove_group(Path(entry.path))
                removed += 1
    return removed


# ---------------------------------------------------------------------------------------------
# What the sandbox uses.

_CPU_POLL_S = 0.05
_reaped_trees: set[CgroupTree] = set()
_reap_lock = threading.Lock()


async def watch_cpu(group: SandboxCgroup, limit_s: float) -> bool:
    """True once the group's CPU time passes `limit_s` (checked every 50 ms)."""
    while True:
        used = group.cpu_seconds()
        if used is not None and used > limit_s:
            return True
        await asyncio.sleep(_CPU_POLL_S)


def sandbox_cgroup_for(limits: SandboxLimits) -> SandboxCgroup | None:
    """A new sandbox's cgroup, or None where there is no usable cgroup tree (said once, loudly).
    The first one under a tree removes what killed envs left there. SandboxError when the kernel
    refuses (the sandbox then does not open: its processes would run unconfined)."""
    tree = detect_cgroups(limits.cgroup)
    if tree is None:
        return None
    with _reap_lock:
        first = tree not in _reaped_trees
        _reaped_trees.add(tree)
    if first:
        reap_stale_groups(tree)
    wanted = CgroupLimits(
        cpu_cores=limits.cpu_cores,
        cpu_weight=limits.cpu_weight,
        memory_bytes=limits.memory_total_mb * 1024 * 1024,
        max_pids=limits.max_processes + 2,  # and the wrapper's two root processes (bwrap and its init)
    )
    try:
        return SandboxCgroup.create(tree, wanted)
    except OSError as exc:
        raise SandboxError(f"could not make the sandbox's cgroup: {exc}") from exc
