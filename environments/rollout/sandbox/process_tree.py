"""Processes on Linux: find a process tree or a uid's processes through /proc, and kill and reap
them. Used by the sandbox so that nothing a command starts outlives it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal

log = logging.getLogger("environments.rollout.sandbox.sandbox")

_REAP_TIMEOUT_S = 10.0


def _parent_map() -> dict[int, int]:
    """pid -> ppid for every process visible in /proc."""
    parents: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 1:
            parents[int(entry.name)] = int(fields[1])
    return parents


def descendants(pid: int) -> list[int]:
    """All live descendants of `pid` (children first), from a snapshot of /proc."""
    children: dict[int, list[int]] = {}
    for child, parent in _parent_map().items():
        children.setdefault(parent, []).append(child)
    found: list[int] = []
    frontier = [pid]
    while frontier:
        nxt: list[int] = []
        for p in frontier:
            nxt.extend(children.get(p, []))
        found.extend(nxt)
        frontier = nxt
    return found


def pids_of_uid(uid: int) -> list[int]:
    """Live (not zombie) processes whose real uid is `uid`."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status") as f:
                status = dict(line.split(":", 1) for line in f if line.startswith(("State:", "Uid:")))
            if int(status["Uid"].split()[0]) == uid and status["State"].split()[0] not in ("Z", "X"):
                found.append(int(entry.name))
        except (OSError, ValueError, KeyError, IndexError):
            continue
    return found


def signal_quietly(pid: int, sig: int, group: bool = False) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        (os.killpg if group else os.kill)(pid, sig)


def kill_process_tree(pid: int) -> None:
    """SIGKILL the process group led by `pid` and every descendant of `pid` (including ones that
    moved to another session or process group), at once. Prefer `terminate_process_tree`, which
    lets `pid` reap its children first, so that no orphaned zombies are left to init."""
    tree = descendants(pid)
    signal_quietly(pid, signal.SIGKILL, group=True)
    for p in tree:
        signal_quietly(p, signal.SIGKILL)
    signal_quietly(pid, signal.SIGKILL)


async def terminate_process_tree(pid: int, exited: asyncio.Future[None], grace_s: float = 0.5) -> None:
    """Kill everything process `pid` started, then `pid` itself; return once `exited` is done.

    Descendants die first, so `pid` (the `unshare` wrapper, or bash) can reap them itself and no
    orphaned zombies are left to init; with a PID namespace, killing its first process makes the
    kernel kill everything inside. After `grace_s`, or on cancellation, the whole process group
    is killed outright.
    """
    for child in descendants(pid):
        signal_quietly(child, signal.SIGKILL)
    try:
        await asyncio.wait_for(asyncio.shield(exited), grace_s)
    except TimeoutError:
        pass
    finally:
        if not exited.done():
            kill_process_tree(pid)
    try:
        await asyncio.wait_for(asyncio.shield(exited), _REAP_TIMEOUT_S)
    except TimeoutError:
        log.error("sandbox: process %d did not exit %ss after SIGKILL", pid, _REAP_TIMEOUT_S)
