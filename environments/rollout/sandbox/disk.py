"""A sandbox's place on disk: a size-limited container, its owner record, removal that cannot fail
on what the agent left in it, and reaping of containers whose owner was killed.

- When the host process is root, each container `<root>/hermes-sbx-XXXX` is its own tmpfs, mounted
  with `size=` the sandbox's disk quota. Everything the sandbox can write (its working directory
  and its private `/tmp`) lives in it, so the quota covers the total, not one file; and closing
  is an unmount, which frees any tree, however deep or wide.
- Otherwise (not root, or tmpfs refused) the container is a plain directory, and removal walks it
  iteratively from directory descriptors (`os.scandir(fd)`, `unlinkat`-style calls with
  `dir_fd`), never following links and never recursing in Python.
- `owner.json` in the container records the creating process (pid and its start time in clock
  ticks since boot, so a reused pid does not count as alive). `reap_stale` removes containers
  whose owner is gone: what a `kill -9` of an earlier run left behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import json
import logging
import os
import shutil
import stat
import tempfile
import time
from pathlib import Path

log = logging.getLogger("environments.rollout.sandbox.sandbox")

CONTAINER_PREFIX = "hermes-sbx-"
OWNER_FILE = "owner.json"
MOUNT_SOURCE = "hermes-sbx"
"""The tmpfs source name of every container mount (shown in /proc/self/mountinfo)."""
LEGACY_MAX_AGE_S = 24 * 3600.0
"""A container without an owner record (made by an older version) is reaped once this old."""

_MS_NOSUID = 2
_MS_NODEV = 4
_MNT_DETACH = 2
_OPEN_FDS = 32


def _load_libc():
    name = ctypes.util.find_library("c")
    if not name:
        return None
    try:
        libc = ctypes.CDLL(name, use_errno=True)
        libc.mount.argtypes = [
            ctypes.c_char_p,
            ctypes.c_char_p,
            ctypes.c_char_p,
            ctypes.c_ulong,
            ctypes.c_char_p,
        ]
        libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
        return libc
    except (OSError, AttributeError):
        return None


_libc = _load_libc()


def process_start_ticks(pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat (start time since boot, in clock ticks); None if not running."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        return int(data[data.rfind(b")") + 2 :].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def mount_tmpfs(path: Path, size_bytes: int, inodes: int) -> bool:
    """Mount a fresh tmpfs on `path` (root only). False when the OS refuses (no privilege)."""
    if _libc is None or os.geteuid() != 0:
        return False
    options = f"size={size_bytes},nr_inodes={inodes},mode=0711".encode()
    if _libc.mount(MOUNT_SOURCE.encode(), os.fsencode(path), b"tmpfs", _MS_NOSUID | _MS_NODEV, options) != 0:
        log.debug("sandbox: tmpfs mount refused: %s", os.strerror(ctypes.get_errno()))
        return False
    return True


def is_container_mount(path: Path) -> bool:
    """Is `path` the mount point of a container tmpfs (in this mount namespace)?"""
    target = os.fsencode(os.path.realpath(path))
    try:
        with open("/proc/self/mountinfo", "rb") as f:
            for line in f:
                fields = line.split()
                sep = fields.index(b"-")
                if _unescape(fields[4]) == target and fields[sep + 2] == MOUNT_SOURCE.encode():
                    return True
    except (OSError, ValueError, IndexError):
        return False
    return False


def _unescape(field: bytes) -> bytes:
    return (
        field.replace(b"\\040", b" ")
        .replace(b"\\011", b"\t")
        .replace(b"\\012", b"\n")
        .replace(b"\\134", b"\\")
    )


def container_mounts() -> list[str]:
    """Mount points of container tmpfs mounts visible in this mount namespace."""
    found = []
    with contextlib.suppress(OSError), open("/proc/self/mountinfo", "rb") as f:
        for line in f:
            fields = line.split()
            with contextlib.suppress(ValueError, IndexError):
                sep = fields.index(b"-")
                if fields[sep + 2] == MOUNT_SOURCE.encode():
                    found.append(os.fsdecode(_unescape(fields[4])))
    return found


def _pid_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def write_owner(container: Path) -> None:
    record = {
        "pid": os.getpid(),
        "start_ticks": process_start_ticks(os.getpid()),
        "pid_namespace": _pid_namespace(),
        "created": time.time(),
    }
    (container / OWNER_FILE).write_text(json.dumps(record))
    os.chmod(container / OWNER_FILE, 0o644)


def owner_alive(container: Path) -> bool | None:
    """True/False from the owner record; None when there is no readable record, or when the owner
    lives in another PID namespace (e.g. another container sharing this temp dir), whose pids
    cannot be checked from here."""
    try:
        record = json.loads((container / OWNER_FILE).read_text())
        pid, ticks = int(record["pid"]), record.get("start_ticks")
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if record.get("pid_namespace", "") != _pid_namespace():
        return None
    now = process_start_ticks(pid)
    return now is not None and (ticks is None or now == ticks)


def remove_tree(path: Path) -> None:
    """Delete `path` and everything below it without recursion and without following links.
    Raises OSError only for the top-level path itself (e.g. permission denied)."""
    try:
        top = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(top.st_mode):
        os.unlink(path)
        return
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    first = os.open(path, flags)
    # One entry per directory on the way down: [descriptor or None, name in its parent, inode].
    # Only the deepest `_OPEN_FDS` keep a descriptor; a parent whose descriptor was closed is
    # reopened through ".." and checked by inode on the way back up.
    stack: list[list] = [[first, "", os.fstat(first).st_ino]]
    stuck: set[int] = set()  # directories that could not be removed: not entered again
    try:
        while stack:
            fd, name, inode = stack[-1]
            child = None
            with os.scandir(fd) as entries:
                for entry in entries:
                    try:
                        is_dir = entry.is_dir(follow_symlinks=False)
                    except OSError:
                        is_dir = False
                    if not is_dir:
                        with contextlib.suppress(OSError):
                            os.unlink(entry.name, dir_fd=fd)
                        continue
                    if entry.inode() in stuck:
                        continue
                    try:
                        os.rmdir(entry.name, dir_fd=fd)  # already empty
                        continue
                    except OSError:
                        pass
                    with contextlib.suppress(OSError):
                        child_fd = os.open(entry.name, flags, dir_fd=fd)
                        child = [child_fd, entry.name, os.fstat(child_fd).st_ino]
                        break
            if child is not None:
                stack.append(child)
                if len(stack) > _OPEN_FDS and stack[-_OPEN_FDS - 1][0] is not None:
                    os.close(stack[-_OPEN_FDS - 1][0])
                    stack[-_OPEN_FDS - 1][0] = None
                continue
            stack.pop()
            if stack:
                parent = stack[-1]
                if parent[0] is None:
                    parent_fd = os.open("..", flags, dir_fd=fd)
                    if os.fstat(parent_fd).st_ino != parent[2]:
                        os.close(parent_fd)
                        raise OSError(f"{path}: a directory moved while it was being removed")
                    parent[0] = parent_fd
                os.close(fd)
                try:
                    os.rmdir(name, dir_fd=parent[0])
                except OSError:
                    stuck.add(inode)
            else:
                os.close(fd)
    finally:
        for entry in stack:
            if entry[0] is not None:
                with contextlib.suppress(OSError):
                    os.close(entry[0])
    os.rmdir(path)


def remove_container(container: Path) -> None:
    """Unmount (when it is a container tmpfs) and delete `container`. Logs, never raises."""
    try:
        mounted = _libc is not None and is_container_mount(container)
        if mounted and _libc.umount2(os.fsencode(container), _MNT_DETACH) != 0:
            log.error("sandbox: could not unmount %s: %s", container, os.strerror(ctypes.get_errno()))
        remove_tree(container)
    except Exception:  # noqa: BLE001 - cleanup must not fail the caller; what is left is reaped later
        log.exception("sandbox: could not remove %s; it will be reaped at the next start", container)


def reap_stale(root: Path) -> list[Path]:
    """Remove containers under `root` whose owner process is gone (or, with no owner record,
    older than `LEGACY_MAX_AGE_S`). Returns what was removed."""
    removed: list[Path] = []
    try:
        candidates = [p for p in root.iterdir() if p.name.startswith(CONTAINER_PREFIX)]
    except OSError:
        return removed
    for container in candidates:
        try:
            if not container.is_dir() or container.is_symlink():
                continue
            alive = owner_alive(container)
            if alive is None:
                if time.time() - container.lstat().st_mtime < LEGACY_MAX_AGE_S:
                    continue
            elif alive:
                continue
        except OSError:
            continue
        remove_container(container)
        if not os.path.lexists(container):
            removed.append(container)
    if removed:
        log.warning("sandbox: removed %d sandbox(es) left by processes that no longer run", len(removed))
    return removed


def default_root() -> Path:
    return Path(tempfile.gettempdir())


def disk_free_fallback_warning(root: Path) -> None:
    usage = shutil.disk_usage(root)
    log.warning(
        "sandbox: no tmpfs containers here (not root?); the disk quota is not enforced "
        "(only the per-file size limit); %d MiB free under %s",
        usage.free // (1024 * 1024),
        root,
    )


def leftover_containers(pid: int, since: float, roots: tuple[Path, ...] = ()) -> list[Path]:
    """Containers that process `pid` made and still has, or that any process made after `since`
    and whose owner is gone: what a test session must not leave behind. Looks in the temp dir,
    in `roots`, and at every mounted container."""
    candidates: set[Path] = set()
    for root in (default_root(), *roots):
        with contextlib.suppress(OSError):
            candidates.update(p for p in root.iterdir() if p.name.startswith(CONTAINER_PREFIX))
    candidates.update(Path(m) for m in container_mounts())
    left = []
    for container in sorted(candidates):
        try:
            record = json.loads((container / OWNER_FILE).read_text())
        except (OSError, ValueError):
            continue
        if record.get("pid") == pid or (
            record.get("created", 0) >= since and owner_alive(container) is False
        ):
            left.append(container)
    return left
