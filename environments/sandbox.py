"""Per-rollout sandbox: a private working directory and contained shell commands.

Each `Sandbox` owns a fresh directory and runs `bash -c` commands there as an unprivileged user,
with resource limits, no network, an allow-listed environment, a timeout that kills every process
the command started, and bounded output. Commands see only an allow-list root
(environments/sandbox_root.py) in their own mount, PID, IPC, UTS and network namespaces; the
directory is a size-limited container that is reaped if its owner dies
(environments/sandbox_disk.py). See docs/sandbox.md for what is enforced how, and what degrades
when the OS lacks a feature.

    async with Sandbox.create(SandboxLimits()) as sb:
        result = await sb.run("python3 -c 'print(1 + 1)'")
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import dataclasses
import functools
import logging
import os
import random
import resource
import shutil
import signal
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from environments.process_tree import (
    pids_of_uid,
    signal_quietly,
    terminate_process_tree,
)
from environments.sandbox_disk import (
    CONTAINER_PREFIX,
    disk_free_fallback_warning,
    mount_tmpfs,
    reap_stale,
    remove_container,
    write_owner,
)
from environments.sandbox_root import ROOT_SETUP, RootPlan, root_plan, setup_args
from hermes_opd.contract.errors import HermesOPDError

log = logging.getLogger(__name__)
T = TypeVar("T")

NOBODY_UID = 65534
NOBODY_GID = 65534
BASH = "/bin/bash"
SH = "/bin/sh"
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
_DRAIN_GRACE_S = 0.25
"""After the command's main process exits, how long to keep reading output that is still buffered."""
TIMEOUT_EXIT_CODE = 124
KILLED_EXIT_CODE = 128 + signal.SIGKILL


class SandboxLimits(BaseModel):
    """Resource limits and isolation settings for one sandbox."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    command_timeout_s: float = Field(
        60.0, gt=0, description="Wall-clock limit per command; on expiry the whole process tree is killed."
    )
    cpu_time_s: int = Field(60, ge=1, description="RLIMIT_CPU per process, in seconds of CPU time.")
    memory_mb: int = Field(
        1024,
        ge=64,
        description="RLIMIT_AS per process, in MiB. Bounds address space, not resident memory; "
        "Python starts fine under 64 MiB but leave headroom for real work.",
    )
    file_size_mb: int = Field(
        64, ge=1, description="RLIMIT_FSIZE: the largest file a command may write, in MiB."
    )
    disk_quota_mb: int = Field(
        256,
        ge=8,
        description="Total size of everything the sandbox can write (working directory and private "
        "/tmp together), in MiB: the sandbox's container is a tmpfs of this size (root only). "
        "Memory-backed: it uses RAM as files are written.",
    )
    max_processes: int = Field(
        64,
        ge=4,
        description="RLIMIT_NPROC for the sandbox user (processes and threads). Only enforced because "
        "commands run as an unprivileged uid; with user='nobody' the count is shared by all "
        "sandboxes running at the same time.",
    )
    max_open_files: int = Field(256, ge=16, description="RLIMIT_NOFILE per process.")
    max_output_bytes: int = Field(
        20_000,
        ge=256,
        description="Output (stdout and stderr merged) kept per command: the first and last halves, "
        "with a truncation marker in between.",
    )
    kill_output_bytes: int = Field(
        16 * 1024 * 1024,
        ge=1024,
        description="A command that writes more than this many bytes of output in total is killed.",
    )
    allow_network: bool = Field(
        False, description="If False, commands run in a network namespace with no usable interface."
    )
    user: Literal["nobody", "per_sandbox"] = Field(
        "nobody",
        description="'nobody': run as uid/gid 65534. 'per_sandbox': run each sandbox as its own uid "
        "from per_sandbox_uid_base.., so concurrent sandboxes cannot read each other's files, "
        "have separate process counts, and leftover processes can be killed by uid. Only "
        "applies when the host process is root.",
    )
    per_sandbox_uid_base: int = Field(
        1_000_000, ge=1000, description="First uid (and gid) used when user='per_sandbox'."
    )
    per_sandbox_uid_count: int = Field(
        1_000_000, ge=1, description="Size of the uid range used when user='per_sandbox'."
    )
    hide_paths: tuple[str, ...] | None = Field(
        None,
        description="Absolute directories that commands see as empty (hidden tests, datasets). None: "
        "the source checkout (or installed task data) of this package. Needs private mounts (root).",
    )
    extra_env: dict[str, str] = Field(
        default_factory=dict, description="Extra environment variables given to every command."
    )


@dataclass(frozen=True)
class CommandResult:
    """What one command did."""

    exit_code: int
    """The exit status; 128 + N when killed by signal N (shell convention); 124 when it timed out
    (as coreutils `timeout`); 137 when killed for flooding output."""
    output: str
    """stdout and stderr merged, decoded as UTF-8 with replacement, possibly truncated."""
    timed_out: bool
    truncated: bool
    duration_s: float


class SandboxError(HermesOPDError, RuntimeError):
    """The sandbox could not be set up or was used after it was closed."""


# ---------------------------------------------------------------------------------------------
# Isolation: how commands are wrapped, detected once per process.


_PRIVATE_MOUNTS_SETUP = r"""
set -e
W="$1"; T="$2"; SETPRIV="$3"; PD="$4"; U="$5"; G="$6"; N="$7"; shift 7
for d in /dev/shm /var/tmp /tmp; do
  if [ -d "$d" ]; then mount --no-canonicalize --bind "$T" "$d"; fi
done
while [ "$N" -gt 0 ]; do
  if [ -d "$1" ]; then mount -t tmpfs -o size=1m,mode=755,nosuid,nodev tmpfs "$1"; fi
  shift; N=$((N - 1))
done
mkdir -p "$W"
mount --no-canonicalize --bind . "$W"
cd "$W"
exec "$SETPRIV" --reuid="$U" --regid="$G" --clear-groups $PD -- "$@"
"""
"""Runs as root inside the command's new mount namespace, before the command:
1. the sandbox's own temp directory is bind-mounted on /dev/shm, /var/tmp and /tmp (nothing is
   shared through them with the host or other sandboxes; it persists across the sandbox's commands);
2. each hidden path is covered by an empty directory (e.g. the tree holding the hidden tests);
3. the working directory is bind-mounted back at its own path (the cwd still refers to it, hence
   `--no-canonicalize`), in case 1 or 2 covered it;
4. the command is exec'd as the sandbox user, killed when `unshare` dies when `$PD` is setpriv's
   `--pdeathsig=KILL` (see `_setpriv_death_flag`)."""


def default_hidden_paths() -> tuple[str, ...]:
    """What commands must not see by default: the source checkout this package runs from (its
    built-in tasks, hidden tests and git history), or, when installed, the package's task data."""
    package = Path(__file__).resolve().parent
    project = package.parent
    if (project / ".git").exists() or (project / "pyproject.toml").exists():
        return (str(project),)
    return (str(package / "tasks"),)


@dataclass(frozen=True)
class Isolation:
    """How commands are confined on this machine (detected once, see `detect_isolation`)."""

    unshare_path: str
    """Absolute path of util-linux `unshare`; empty when no wrapper is used."""
    unshare_flags: tuple[str, ...]
    """Flags for the `unshare` wrapper; empty when no wrapper is used."""
    drop_privileges: bool
    """True when commands run as an unprivileged uid (host process is root)."""
    network_isolated: bool
    pid_namespace: bool
    """When the command's first process exits or is killed, the kernel kills all it started."""
    private_tmp: bool = False
    """/tmp, /var/tmp and /dev/shm are the sandbox's own directory, and hidden paths are hidden."""
    setpriv_path: str = ""
    pivot_root_path: str = ""
    root: RootPlan | None = None
    """When set, commands see only the allow-list root of `environments/sandbox_root.py`."""

    @property
    def private_root(self) -> bool:
        return self.root is not None

    def wrapper(
        self,
        uid: int | None,
        gid: int | None,
        workdir: Path,
        tmpdir: Path,
        hidden: tuple[str, ...] = (),
        rootdir: Path | None = None,
    ) -> list[str]:
        """The argv prefix that confines a command; the command's own argv follows it. `rootdir`:
        an empty directory the allow-list root is mounted on (inside the command's namespace)."""
        if not self.unshare_flags:
            return []
        if self.root is not None and uid is not None and gid is not None and rootdir is not None:
            head = [SH, "-c", ROOT_SETUP, "sh", str(rootdir), str(workdir), str(tmpdir), self.setpriv_path]
            head += [_setpriv_death_flag(self.setpriv_path), self.pivot_root_path]
            return [
                self.unshare_path,
                *self.unshare_flags,
                "--",
                *head,
                str(uid),
                str(gid),
                *setup_args(self.root, hidden),
            ]
        if self.private_tmp and uid is not None and gid is not None:
            setup = [SH, "-c", _PRIVATE_MOUNTS_SETUP, "sh", str(workdir), str(tmpdir), self.setpriv_path]
            setup.append(_setpriv_death_flag(self.setpriv_path))
            ids = [str(uid), str(gid)]
            return [self.unshare_path, *self.unshare_flags, "--", *setup, *ids, str(len(hidden)), *hidden]
        ids = [] if uid is None or gid is None else ["--setgid", str(gid), "--setuid", str(uid)]
        return [self.unshare_path, *self.unshare_flags, *ids, "--"]


@functools.cache
def _setpriv_death_flag(setpriv: str) -> str:
    """`--pdeathsig=KILL` when this setpriv has it (util-linux >= 2.33), else "" (the command then
    outlives a killed env until the next start reaps its sandbox)."""
    try:
        help_text = subprocess.run([setpriv, "--help"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    return "--pdeathsig=KILL" if "--pdeathsig" in help_text else ""


_isolation_cache: dict[bool, Isolation] = {}
_isolation_lock = threading.Lock()


def detect_isolation(allow_network: bool) -> Isolation:
    """Find the strongest confinement this machine supports; cached; logs a warning if degraded."""
    with _isolation_lock:
        if allow_network not in _isolation_cache:
            _isolation_cache[allow_network] = _probe_isolation(allow_network)
        return _isolation_cache[allow_network]


def _probe_isolation(allow_network: bool) -> Isolation:
    is_root = os.geteuid() == 0
    net = () if allow_network else ("--net",)
    unshare = shutil.which("unshare") or ""
    setpriv = shutil.which("setpriv") or ""
    candidates: list[Isolation] = []
    if unshare and is_root:
        full = (*net, "--pid", "--fork", "--mount-proc")
        pivot_root = shutil.which("pivot_root") or shutil.which("pivot_root", path="/usr/sbin:/sbin") or ""
        if setpriv and shutil.which("mount") and pivot_root:
            plan = root_plan()
            for extra in (("--ipc", "--uts", "--cgroup"), ("--ipc", "--uts")):
                flags = (*net, *extra, "--pid", "--fork", "--mount")
                candidates.append(
                    Isolation(unshare, flags, True, True, True, True, setpriv, pivot_root, plan)
                )
        if setpriv and shutil.which("mount"):
            candidates.append(
                Isolation(unshare, full, True, True, True, private_tmp=True, setpriv_path=setpriv)
            )
        for flags in (full, (*net, "--pid", "--fork"), net):
            if flags:
                candidates.append(Isolation(unshare, flags, True, True, "--pid" in flags))
    elif unshare:
        userns = ("--user", "--map-root-user")
        for flags in ((*net, "--pid", "--fork", "--mount-proc"), (*net, "--pid", "--fork"), net):
            candidates.append(Isolation(unshare, (*userns, *flags), False, True, "--pid" in flags))
    for iso in candidates:
        if _works(iso, NOBODY_UID if is_root else None, NOBODY_GID if is_root else None):
            iso = dataclasses.replace(iso, network_isolated=allow_network or "--net" in iso.unshare_flags)
            if not iso.pid_namespace:
                log.warning(
                    "sandbox: no PID namespace; background processes that leave the command's "
                    "process group may outlive their command"
                )
            if not iso.private_tmp:
                log.warning(
                    "sandbox: /tmp, /var/tmp and /dev/shm are shared with the host and other sandboxes"
                )
            if not iso.private_root:
                log.warning(
                    "sandbox: no allow-list root (needs root, mount namespaces, setpriv and pivot_root): "
                    "commands see the host's filesystem, protected by file permissions only, and "
                    "SysV IPC is shared with the host"
                )
            return iso
    if not allow_network:
        log.warning(
            "sandbox: `unshare --net` is unavailable here; commands in the sandbox HAVE NETWORK ACCESS"
        )
    if not is_root:
        log.warning("sandbox: not root; commands run as the current user (rlimits still apply)")
    return Isolation("", (), is_root, allow_network, False)


def _works(iso: Isolation, uid: int | None, gid: int | None) -> bool:
    """Does a trivial command run under `iso` here?"""
    with tempfile.TemporaryDirectory(prefix="hermes-sbx-probe-") as probe_dir:
        os.chmod(probe_dir, 0o755)
        tmpdir = Path(probe_dir) / "tmp"
        tmpdir.mkdir()
        rootdir = Path(probe_dir) / "root"
        rootdir.mkdir()
        argv = [*iso.wrapper(uid, gid, Path(probe_dir), tmpdir, rootdir=rootdir), BASH, "-c", "exit 0"]
        try:
            done = subprocess.run(argv, cwd=probe_dir, capture_output=True, timeout=10, check=False)
        except (OSError, subprocess.SubprocessError):
            return False
    if done.returncode != 0:
        log.debug("sandbox: isolation %s unavailable: %s", iso.unshare_flags, done.stderr[-500:])
    return done.returncode == 0


# ---------------------------------------------------------------------------------------------
# Child-side setup: rlimits, no_new_privs and the parent-death signal, applied after fork and before exec.

_PR_SET_PDEATHSIG = 1
_PR_SET_NO_NEW_PRIVS = 38


def _load_prctl():
    name = ctypes.util.find_library("c")
    if not name:
        return None
    try:
        fn = ctypes.CDLL(name, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    return fn


_prctl = _load_prctl()


def _rlimits(limits: SandboxLimits) -> list[tuple[int, tuple[int, int]]]:
    mib = 1024 * 1024
    return [
        (resource.RLIMIT_CPU, (limits.cpu_time_s, limits.cpu_time_s + 1)),
        (resource.RLIMIT_AS, (limits.memory_mb * mib, limits.memory_mb * mib)),
        (resource.RLIMIT_FSIZE, (limits.file_size_mb * mib, limits.file_size_mb * mib)),
        (resource.RLIMIT_NPROC, (limits.max_processes, limits.max_processes)),
        (resource.RLIMIT_NOFILE, (limits.max_open_files, limits.max_open_files)),
        (resource.RLIMIT_CORE, (0, 0)),
    ]


def _make_preexec(limits: SandboxLimits):
    """A preexec_fn that only makes plain system calls (safe enough after fork in a threaded parent)."""
    rlimits = _rlimits(limits)
    prctl = _prctl
    setrlimit = resource.setrlimit

    def preexec() -> None:
        for which, value in rlimits:
            setrlimit(which, value)
        if prctl is not None:
            prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
            # Dies with the env (the thread that started it): a killed env leaves no command running.
            prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)

    return preexec


# ---------------------------------------------------------------------------------------------
# Processes: see environments/process_tree.py.


# ---------------------------------------------------------------------------------------------
# Output: bounded, read incrementally.


class _BoundedOutput:
    """Keeps the first and last `limit // 2` bytes of a stream and counts the rest."""

    def __init__(self, limit: int) -> None:
        self.head_limit = limit // 2
        self.tail_limit = limit - self.head_limit
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            excess = len(self.tail) - self.tail_limit
            if excess > 0:
                del self.tail[:excess]

    @property
    def truncated(self) -> bool:
        return self.total > len(self.head) + len(self.tail)

    def render(self) -> str:
        head = self.head.decode("utf-8", errors="replace")
        tail = self.tail.decode("utf-8", errors="replace")
        if not self.truncated:
            return head + tail
        omitted = self.total - len(self.head) - len(self.tail)
        return f"{head}\n[... output truncated: {omitted} of {self.total} bytes omitted ...]\n{tail}"


class _CommandProtocol(asyncio.SubprocessProtocol):
    """Collects a command's output as it arrives (no backpressure, bounded memory) and signals
    exit, end of output, and output floods through futures."""

    def __init__(self, max_output_bytes: int, kill_output_bytes: int) -> None:
        loop = asyncio.get_running_loop()
        self.output = _BoundedOutput(max_output_bytes)
        self.kill_output_bytes = kill_output_bytes
        self.exited: asyncio.Future[None] = loop.create_future()
        self.output_closed: asyncio.Future[None] = loop.create_future()
        self.flooded: asyncio.Future[None] = loop.create_future()

    def pipe_data_received(self, fd: int, data: bytes | str) -> None:
        self.output.feed(data if isinstance(data, bytes) else data.encode())
        if self.output.total > self.kill_output_bytes and not self.flooded.done():
            self.flooded.set_result(None)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if fd == 1 and not self.output_closed.done():
            self.output_closed.set_result(None)

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)


@dataclass(eq=False)
class _Running:
    transport: asyncio.SubprocessTransport
    protocol: _CommandProtocol

    @property
    def pid(self) -> int:
        return self.transport.get_pid()

    async def terminate(self) -> None:
        await terminate_process_tree(self.pid, self.protocol.exited)


# ---------------------------------------------------------------------------------------------
# The sandbox.

_uids_in_use: set[int] = set()
_uids_lock = threading.Lock()


def _allocate_uid(limits: SandboxLimits) -> int:
    with _uids_lock:
        for _ in range(1000):
            uid = limits.per_sandbox_uid_base + random.randrange(limits.per_sandbox_uid_count)
            if uid not in _uids_in_use:
                _uids_in_use.add(uid)
                return uid
    raise SandboxError("no free per-sandbox uid")


def _release_uid(uid: int) -> None:
    with _uids_lock:
        _uids_in_use.discard(uid)


class Sandbox:
    """A private working directory plus contained command execution. Create with `Sandbox.create`."""

    def __init__(
        self,
        *,
        container: Path,
        workdir: Path,
        dir_fd: int,
        limits: SandboxLimits,
        isolation: Isolation,
        uid: int | None,
        gid: int | None,
    ) -> None:
        self._container = container
        self._workdir = workdir
        self._dir_fd = dir_fd
        self._limits = limits
        self._isolation = isolation
        self._uid = uid
        self._gid = gid
        self._running: set[_Running] = set()
        hidden = limits.hide_paths if limits.hide_paths is not None else default_hidden_paths()
        self._hidden_paths = tuple(str(Path(p).resolve()) for p in hidden if os.path.isabs(p))
        if self._hidden_paths and not isolation.private_tmp:
            _warn_once(f"sandbox: cannot hide {', '.join(self._hidden_paths)} from commands on this machine")
        self._offloaded: set[asyncio.Future[Any]] = set()
        self._closed = False

    # -- construction and teardown ------------------------------------------------------------

    @classmethod
    @contextlib.asynccontextmanager
    async def create(
        cls, limits: SandboxLimits | None = None, *, root_dir: str | os.PathLike[str] | None = None
    ) -> AsyncIterator[Sandbox]:
        """A fresh sandbox, removed (processes killed, directory deleted) when the block exits,
        also on exception or cancellation."""
        sandbox = await cls.open(limits, root_dir=root_dir)
        try:
            yield sandbox
        finally:
            await asyncio.shield(sandbox.close())

    @classmethod
    async def open(
        cls, limits: SandboxLimits | None = None, *, root_dir: str | os.PathLike[str] | None = None
    ) -> Sandbox:
        """Like `create`, for callers that manage the lifetime themselves; call `close()`."""
        limits = limits or SandboxLimits()
        isolation = await asyncio.to_thread(detect_isolation, limits.allow_network)
        uid = gid = None
        if isolation.drop_privileges:
            if limits.user == "per_sandbox":
                uid = gid = _allocate_uid(limits)
            else:
                uid, gid = NOBODY_UID, NOBODY_GID
        # The thread runs to its end even when this task is cancelled: shielded, its directories are
        # still ours to remove (a SIGTERM mid-rollout would otherwise leave them for the next start).
        making = asyncio.ensure_future(
            asyncio.to_thread(_make_dirs, root_dir, uid, gid, limits.disk_quota_mb)
        )
        try:
            container, workdir, dir_fd = await asyncio.shield(making)
        except BaseException:
            if not making.cancelled():
                await asyncio.shield(_discard_made_dirs(making))
            if uid is not None and limits.user == "per_sandbox":
                _release_uid(uid)
            raise
        return cls(
            container=container,
            workdir=workdir,
            dir_fd=dir_fd,
            limits=limits,
            isolation=isolation,
            uid=uid,
            gid=gid,
        )

    async def close(self) -> None:
        """Kill everything still running and delete the directory. Idempotent."""
        if self._closed:
            return
        self._closed = True
        await asyncio.gather(*(r.terminate() for r in list(self._running)), return_exceptions=True)
        # File operations still running in threads use `dir_fd`: let them finish before closing it.
        await asyncio.gather(*list(self._offloaded), return_exceptions=True)
        if self._uid is not None and self._limits.user == "per_sandbox":
            for _ in range(100):  # a fork bomb may race the first passes
                leftovers = pids_of_uid(self._uid)
                if not leftovers:
                    break
                for pid in leftovers:
                    signal_quietly(pid, signal.SIGKILL)
                await asyncio.sleep(0.01)
        with contextlib.suppress(OSError):
            os.close(self._dir_fd)
        await asyncio.to_thread(remove_container, self._container)
        if self._uid is not None and self._limits.user == "per_sandbox":
            _release_uid(self._uid)

    # -- properties ---------------------------------------------------------------------------

    @property
    def workdir(self) -> Path:
        """The command's working directory (also HOME and TMPDIR)."""
        return self._workdir

    @property
    def dir_fd(self) -> int:
        """An open descriptor of `workdir`, immune to the directory being renamed or replaced."""
        self._check_open()
        return self._dir_fd

    @property
    def uid(self) -> int | None:
        """The uid commands run as, or None when they run as the host process's user."""
        return self._uid

    @property
    def gid(self) -> int | None:
        return self._gid

    @property
    def limits(self) -> SandboxLimits:
        return self._limits

    @property
    def isolation(self) -> Isolation:
        return self._isolation

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxError("sandbox is closed")

    # -- work in threads ----------------------------------------------------------------------

    async def offload(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """Run `fn(*args, **kwargs)` in a worker thread, off the event loop. `dir_fd` stays open until `fn`
        returns, even if the caller is cancelled or the sandbox is closed meanwhile (so the
        descriptor number can never be reused under a running file operation)."""
        self._check_open()
        future = asyncio.get_running_loop().run_in_executor(None, functools.partial(fn, *args, **kwargs))
        self._offloaded.add(future)
        future.add_done_callback(_retire_offloaded(self._offloaded))
        return await asyncio.shield(future)

    # -- commands -----------------------------------------------------------------------------

    def environment(self) -> dict[str, str]:
        """The complete environment of a command: an allow-list, never the host's variables."""
        home = str(self._workdir)
        env = {
            "PATH": SANDBOX_PATH,
            "HOME": home,
            "TMPDIR": "/tmp" if self._isolation.private_tmp else home,
            "PWD": home,
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "TERM": "dumb",
            "PYTHONIOENCODING": "utf-8",
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONUNBUFFERED": "1",
            "PYTHONNOUSERSITE": "1",
        }
        if self._uid is not None:
            env["USER"] = env["LOGNAME"] = "nobody" if self._uid == NOBODY_UID else f"sandbox{self._uid}"
        env.update(self._limits.extra_env)
        return env

    async def run(
        self,
        command: str,
        timeout_s: float | None = None,
        *,
        stdin: bytes | None = None,
        cpu_time_s: int | None = None,
    ) -> CommandResult:
        """Run `bash -c command` in the sandbox. Never raises for what the command does; raises
        SandboxError if the sandbox is closed or the process cannot be started. `cpu_time_s`
        replaces the limits' RLIMIT_CPU for this command only."""
        self._check_open()
        timeout = self._limits.command_timeout_s if timeout_s is None else timeout_s
        started = time.monotonic()
        running = await self._start(command, with_stdin=stdin is not None, cpu_time_s=cpu_time_s)
        protocol = running.protocol
        self._running.add(running)
        timed_out = flooded = False
        try:
            if stdin is not None:
                pipe = running.transport.get_pipe_transport(0)
                if pipe is not None:
                    with contextlib.suppress(OSError, RuntimeError):
                        pipe.write(stdin)
                        pipe.close()
            try:
                async with asyncio.timeout(timeout):
                    await asyncio.wait(
                        {protocol.exited, protocol.flooded}, return_when=asyncio.FIRST_COMPLETED
                    )
                    flooded = protocol.flooded.done()
                    if not flooded:
                        # Output still in the pipe, or held open by a background process: read briefly.
                        await asyncio.wait({protocol.output_closed}, timeout=_DRAIN_GRACE_S)
            except TimeoutError:
                timed_out = True
        finally:
            try:
                if not protocol.exited.done():
                    await running.terminate()
                elif not self._isolation.pid_namespace:
                    # Without a PID namespace, background jobs may still hold on: kill the group.
                    signal_quietly(running.pid, signal.SIGKILL, group=True)
            finally:
                running.transport.close()
                self._running.discard(running)
        text = protocol.output.render()
        if flooded:
            text += f"\n[command killed: output exceeded {self._limits.kill_output_bytes} bytes]"
        if timed_out:
            text += f"\n[command timed out after {timeout:g}s and was killed]"
        if timed_out:
            code = TIMEOUT_EXIT_CODE
        elif flooded:
            code = KILLED_EXIT_CODE
        else:
            code = running.transport.get_returncode()
            code = KILLED_EXIT_CODE if code is None else code if code >= 0 else 128 - code
        return CommandResult(
            exit_code=code,
            output=text,
            timed_out=timed_out,
            truncated=protocol.output.truncated or flooded,
            duration_s=time.monotonic() - started,
        )

    async def _start(self, command: str, *, with_stdin: bool, cpu_time_s: int | None = None) -> _Running:
        wrapper = self._isolation.wrapper(
            self._uid,
            self._gid,
            self._workdir,
            self._container / "tmp",
            self._hidden_paths,
            rootdir=self._container / "root",
        )
        argv = [*wrapper, *_shell(command, self._isolation.pid_namespace)]
        privileges = {}
        if self._isolation.drop_privileges and not self._isolation.unshare_flags:
            privileges = {"user": self._uid, "group": self._gid, "extra_groups": []}
        loop = asyncio.get_running_loop()
        limits = self._limits
        if cpu_time_s is not None:
            limits = limits.model_copy(update={"cpu_time_s": max(1, int(cpu_time_s))})
        creating = asyncio.ensure_future(
            loop.subprocess_exec(
                lambda: _CommandProtocol(limits.max_output_bytes, limits.kill_output_bytes),
                *argv,
                stdin=subprocess.PIPE if with_stdin else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                cwd=self._workdir,
                env=self.environment(),
                start_new_session=True,
                preexec_fn=_make_preexec(limits),
                **privileges,
            )
        )
        try:
            transport, protocol = await asyncio.shield(creating)
        except asyncio.CancelledError:
            # Cancelled while asyncio was still wiring up the pipes: the process exists already,
            # and asyncio's own cleanup would kill only the first process, not the tree.
            with contextlib.suppress(Exception):
                transport, protocol = await creating
                orphan = _Running(transport, protocol)
                await orphan.terminate()
                transport.close()
            raise
        except (OSError, subprocess.SubprocessError) as exc:
            raise SandboxError(f"could not start command: {exc}") from exc
        return _Running(transport, protocol)


def _retire_offloaded(pending: set[asyncio.Future[Any]]) -> Callable[[asyncio.Future[Any]], None]:
    def done(future: asyncio.Future[Any]) -> None:
        pending.discard(future)
        if not future.cancelled():
            future.exception()  # retrieved: a caller that was cancelled no longer will

    return done


def _shell(command: str, pid_namespace: bool) -> list[str]:
    """argv running `command` with bash. In a PID namespace the first process is the namespace's
    init, which the kernel shields from its own default-action signals; so an outer bash stays
    init (and reaps orphans) while the command runs in a child, and its status is passed on."""
    if not pid_namespace:
        return [BASH, "-c", command]
    return [BASH, "-c", '"$0" -c "$1"; exit $?', BASH, command]


@functools.cache
def _warn_once(message: str) -> None:
    log.warning(message)


@functools.cache
def _warn_if_not_traversable(root: Path) -> None:
    closed = [str(p) for p in (root, *root.parents) if not p.stat().st_mode & stat.S_IXOTH]
    if closed:
        log.warning(
            "sandbox: %s not searchable by other users; commands still start in their working "
            "directory, but absolute paths to it (e.g. $HOME) fail. Choose another root_dir.",
            ", ".join(closed),
        )


_warn_no_quota = functools.cache(disk_free_fallback_warning)
_reaped_roots: set[Path] = set()
_reap_lock = threading.Lock()
_CONTAINER_INODES = 1 << 17


def _reap_once(root: Path) -> None:
    """At the first sandbox under `root` in this process: remove what killed processes left there."""
    with _reap_lock:
        if root in _reaped_roots:
            return
        _reaped_roots.add(root)
    reap_stale(root)


async def _discard_made_dirs(making: asyncio.Future) -> None:
    """Remove what a `_make_dirs` thread made for a sandbox whose opener was cancelled."""
    with contextlib.suppress(BaseException):
        _container, _workdir, dir_fd = await making
        os.close(dir_fd)
        await asyncio.to_thread(remove_container, _container)


def _make_dirs(
    root_dir: str | os.PathLike[str] | None, uid: int | None, gid: int | None, quota_mb: int = 256
) -> tuple[Path, Path, int]:
    """Create `<root>/hermes-sbx-XXXX/{work,tmp,root}` and its owner record. When the host process
    is root, the container is a tmpfs of `quota_mb` MiB (see environments/sandbox_disk.py). The
    container is the host user's (so the sandbox user cannot rename or replace `work`); `work`
    belongs to the sandbox user, mode 0700; `tmp` (mode 1777) becomes the commands' /tmp when the
    OS allows private mounts; `root` is where each command's allow-list root is mounted."""
    root = Path(root_dir) if root_dir is not None else Path(tempfile.gettempdir())
    root.mkdir(parents=True, exist_ok=True)
    _reap_once(root.resolve())
    if uid is not None:
        _warn_if_not_traversable(root.resolve())
    container = Path(tempfile.mkdtemp(prefix=CONTAINER_PREFIX, dir=root)).resolve()
    try:
        if not mount_tmpfs(container, quota_mb * 1024 * 1024, _CONTAINER_INODES):
            _warn_no_quota(container.parent)
        os.chmod(container, 0o711)
        write_owner(container)
        workdir = container / "work"
        workdir.mkdir(mode=0o700)
        tmpdir = container / "tmp"  # /tmp, /var/tmp and /dev/shm of the commands, when private_tmp
        tmpdir.mkdir()
        os.chmod(tmpdir, 0o1777)
        (container / "root").mkdir(mode=0o755)
        if uid is not None and gid is not None:
            os.chown(workdir, uid, gid)
        dir_fd = os.open(workdir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except BaseException:
        remove_container(container)
        raise
    return container, workdir, dir_fd
