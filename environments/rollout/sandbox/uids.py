"""Per-sandbox uids reserved across every process on the host, not just within one.

Two env processes on one machine draw from the same uid range. A uid is taken by holding an
exclusive `flock` on `<lock dir>/<uid>.lock` for the sandbox's lifetime; the kernel drops the lock
when the holder dies, however it dies, so nothing is leaked. The lock file is removed on release;
a taker that locked a file that was removed meanwhile notices (its descriptor no longer names the
file at that path) and tries again.

The lock directory is root's (mode 0700): only root runs sandboxes under per-sandbox uids, and
commands cannot see it (their allow-list root holds no /run).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import threading
from dataclasses import dataclass
from pathlib import Path

DEFAULT_LOCK_DIR = Path("/run/hermes-opd/sandbox-uids")
_ATTEMPTS = 1000


@dataclass(frozen=True)
class UidReservation:
    uid: int
    fd: int
    path: Path


class UidRegistry:
    """Draws free uids from a range, each held by a lock file, for this and every other process."""

    def __init__(self, lock_dir: Path = DEFAULT_LOCK_DIR) -> None:
        self.lock_dir = lock_dir
        self._held: dict[int, UidReservation] = {}
        self._lock = threading.Lock()

    def reserve(self, base: int, count: int) -> int | None:
        """A uid in [base, base + count) that no process holds, now held by this one; None when
        none was found in a thousand draws."""
        self.lock_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        with self._lock:
            for _ in range(_ATTEMPTS):
                uid = base + random.randrange(count)
                if uid in self._held:
                    continue
                taken = self._try_lock(uid)
                if taken is not None:
                    self._held[uid] = taken
                    return uid
        return None

    def _try_lock(self, uid: int) -> UidReservation | None:
        path = self.lock_dir / f"{uid}.lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        try:
            same_file = os.stat(path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same_file = False
        if not same_file:  # released and removed between our open and our lock
            os.close(fd)
            return None
        return UidReservation(uid, fd, path)

    def release(self, uid: int) -> None:
        with self._lock:
            taken = self._held.pop(uid, None)
        if taken is None:
            return
        with contextlib.suppress(FileNotFoundError):
            os.unlink(taken.path)  # while still locked: a later taker makes a fresh file
        os.close(taken.fd)

    def held(self) -> set[int]:
        with self._lock:
            return set(self._held)


registry = UidRegistry()
"""The registry of this process."""
