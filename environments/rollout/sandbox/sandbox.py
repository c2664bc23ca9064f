"""Per-rollout sandbox: a private working directory and contained shell commands.

Each `Sandbox` owns a fresh directory and runs `bash -c` commands there as an unprivileged user,
with resource limits, no network, an allow-listed environment, a timeout that kills every process
the command started, and bounded output. Commands see only an allow-list root
(environments/rollout/sandbox/root.py) in their own mount, PID, IPC, UTS and network namespaces; the
directory is a size-limited container that is reaped if its owner dies
(environments/rollout/sandbox/disk.py). How a command is confined (namespaces wrapper, rlimits, the
parent-death signal) is environments/rollout/sandbox/isolation.py; the limits, results and error are
environments/rollout/sandbox/limits.py. See docs/sandbox.md for what is enforced how, and what degrades
when the OS lacks a feature.

    async with Sandbox.create(SandboxLimits()) as sb:
        result = await sb.run("python3 -c 'print(1 + 1)'")
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import signal
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from environments.rollout.sandbox.bwrap import launcher_argv, write_etc
from environments.rollout.sandbox.cgroup import SandboxCgroup, sandbox_cgroup_for, watch_cpu
from environments.rollout.sandbox.command_output import CommandProtocol, RunningCommand
from environments.rollout.sandbox.disk import (
    CONTAINER_PREFIX,
    disk_free_fallback_warning,
    mount_tmpfs,
    reap_stale,
    remove_container,
    write_owner,
)
from environments.rollout.sandbox.isolation import (
    BASH,
    SH,
    Isolation,
    default_hidden_paths,
    detect_isolation,
    make_preexec,
    prlimit_args,
)
from environments.rollout.sandbox.limits import (
    KILLED_EXIT_CODE,
    NOBODY_GID,
    NOBODY_UID,
    TIMEOUT_EXIT_CODE,
    CommandResult,
    SandboxError,
    SandboxLimits,
)
from environments.rollout.sandbox.process_tree import (
    pids_of_uid,
    signal_quietly,
)
from environments.rollout.sandbox.seccomp import userns_filter
from environments.rollout.sandbox.uids import registry as uid_registry

log = logging.getLogger(__name__)
T = TypeVar("T")

SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
_DRAIN_GRACE_S = 0.25
"""After the command's main process exits, how long to keep reading output that is still buffered."""


# ---------------------------------------------------------------------------------------------
# Processes: see environments/rollout/sandbox/process_tree.py.


# ---------------------------------------------------------------------------------------------
# The sandbox.


def _allocate_uid(limits: SandboxLimits) -> int:
    """A uid no other sandbox on this host (in any process) uses; see environments/rollout/sandbox/uids.py."""
    uid = uid_registry.reserve(limits.per_sandbox_uid_base, limits.per_sandbox_uid_count)
    if uid is None:
        raise SandboxError("no free per-sandbox uid")
    return uid


def _release_uid(uid: int) -> None:
    uid_registry.release(uid)


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
        cgroup: SandboxCgroup | None = None,
    ) -> None:
        self._container = container
        self._cgroup = cgroup
        self._workdir = workdir
        self._dir_fd = dir_fd
        self._limits = limits
        self._isolation = isolation
        self._uid = uid
        self._gid = gid
        self._running: set[RunningCommand] = set()
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
            await _to_the_end(sandbox.close())

    @classmethod
    async def open(
        cls, limits: SandboxLimits | None = None, *, root_dir: str | os.PathLike[str] | None = None
    ) -> Sandbox:
        """Like `create`, for callers that manage the lifetime themselves; call `close()`."""
        limits = limits or SandboxLimits()
        isolation = await asyncio.to_thread(detect_isolation, limits.allow_network, limits.root_builder)
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
        grouping = asyncio.ensure_future(asyncio.to_thread(sandbox_cgroup_for, limits))
        try:
            container, workdir, dir_fd = await asyncio.shield(making)
            cgroup = await asyncio.shield(grouping)
        except BaseException:
            if not making.cancelled():
                await _to_the_end(_discard_made_dirs(making))
            await _to_the_end(_discard_cgroup(grouping))
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
            cgroup=cgroup,
        )

    async def close(self) -> None:
        """Kill everything still running and delete the directory. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
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
        finally:  # a close cancelled part way (asyncio.run's last sweep) still removes what it can
            await self._remove_cgroup_and_directory()

    async def _remove_cgroup_and_directory(self) -> None:
        try:
            if self._cgroup is not None:
                await _to_the_end(asyncio.to_thread(self._cgroup.close))
        finally:
            with contextlib.suppress(OSError):
                os.close(self._dir_fd)
            await _to_the_end(asyncio.to_thread(remove_container, self._container))
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
    def cgroup(self) -> SandboxCgroup | None:
        """The sandbox's control group, or None where cgroups are unusable (see docs/sandbox.md)."""
        return self._cgroup

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
        replaces the limits' RLIMIT_CPU for this command only and, with a cgroup, is the CPU budget
        of all the command's processes together (forks included): past it, the command is killed
        (`CommandResult.cpu_exceeded`)."""
        self._check_open()
        timeout = self._limits.command_timeout_s if timeout_s is None else timeout_s
        started = time.monotonic()
        # The group's CPU time is read BEFORE the command starts: read after, it would already hold
        # whatever the command ran while this (possibly busy) event loop had not come back to it.
        cpu_limit = self._cpu_limit(cpu_time_s)
        running = await self._start(command, with_stdin=stdin is not None, cpu_time_s=cpu_time_s)
        protocol = running.protocol
        self._running.add(running)
        timed_out = flooded = False
        budget = self._cpu_budget(cpu_limit)
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
                        {protocol.exited, protocol.flooded, *budget}, return_when=asyncio.FIRST_COMPLETED
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
                for watch in budget:
                    watch.cancel()
                running.transport.close()
                self._running.discard(running)
        cpu_exceeded = any(w.done() and not w.cancelled() and w.result() for w in budget)
        cpu_exceeded = cpu_exceeded or self._over_limit(cpu_limit)
        text = protocol.output.render()
        if cpu_exceeded:
            text += f"\n[command killed: its processes used more than {cpu_time_s}s of CPU time]"
        if flooded:
            text += f"\n[command killed: output exceeded {self._limits.kill_output_bytes} bytes]"
        if timed_out:
            text += f"\n[command timed out after {timeout:g}s and was killed]"
        if timed_out:
            code = TIMEOUT_EXIT_CODE
        elif flooded or cpu_exceeded:
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
            cpu_exceeded=cpu_exceeded,
        )

    def _seccomp_address(self) -> int | None:
        """The user-namespace filter, where commands drop privileges (as root, the namespaces
        wrapper needs no user namespace; unprivileged, it makes one and must not be filtered)."""
        if not self._isolation.drop_privileges:
            return None
        found = userns_filter()
        return None if found is None else found.address

    def _cpu_limit(self, cpu_time_s: int | None) -> float | None:
        """The sandbox cgroup's CPU seconds so far plus the command's budget: the total its processes
        may reach. None without a budget or a cgroup that counts CPU time (nothing to watch)."""
        if cpu_time_s is None or self._cgroup is None:
            return None
        used = self._cgroup.cpu_seconds()
        return None if used is None else used + cpu_time_s

    def _cpu_budget(self, cpu_limit: float | None) -> set[asyncio.Task[bool]]:
        """A watcher that finishes (True) once the sandbox's cgroup passes `cpu_limit`."""
        if cpu_limit is None or self._cgroup is None:
            return set()
        return {asyncio.ensure_future(watch_cpu(self._cgroup, cpu_limit))}

    def _over_limit(self, cpu_limit: float | None) -> bool:
        """After the command: did its processes together pass `cpu_limit`? The watcher polls, so a
        command that ends between two polls is judged here, on the group's exact total (exited
        processes included)."""
        if cpu_limit is None or self._cgroup is None:
            return False
        used = self._cgroup.cpu_seconds()
        return used is not None and used > cpu_limit

    async def _start(
        self, command: str, *, with_stdin: bool, cpu_time_s: int | None = None
    ) -> RunningCommand:
        limits = self._limits
        if cpu_time_s is not None:
            limits = limits.model_copy(update={"cpu_time_s": max(1, int(cpu_time_s))})
        iso = self._isolation
        # Under bubblewrap (with prlimit), nothing runs in Python between fork and exec: a shell joins
        # the cgroup, prlimit sets the rlimits, bwrap loads the seccomp filter and sets no_new_privs
        # and the parent-death signal. That spares the full fork a `preexec_fn` forces (see
        # environments/rollout/sandbox/bwrap.py). Otherwise the forked child does it all in `preexec_fn`.
        direct = bool(iso.bwrap_path and iso.prlimit_path and self._uid is not None)
        seccomp_read = None
        filter_ = userns_filter() if direct and iso.drop_privileges else None
        if filter_ is not None:
            seccomp_read, seccomp_write = os.pipe()
            try:
                os.write(seccomp_write, filter_.program_bytes)  # a few hundred bytes: fits the pipe
            finally:
                os.close(seccomp_write)
        wrapper = iso.wrapper(
            self._uid,
            self._gid,
            self._workdir,
            self._container / "tmp",
            self._hidden_paths,
            rootdir=self._container / "root",
            seccomp_fd=seccomp_read,
        )
        # Under bubblewrap the command is not the namespace's init (bwrap's own process is).
        init = iso.pid_namespace and not iso.bwrap_path
        argv = [*wrapper, *_shell(command, init)]
        spawn: dict[str, Any] = {}
        if direct:
            procs = self._cgroup.procs_files if self._cgroup else []
            argv = [*launcher_argv(SH, iso.prlimit_path, procs, prlimit_args(limits)), *argv]
            spawn["pass_fds"] = () if seccomp_read is None else (seccomp_read,)
        else:
            cgroup_fds = self._cgroup.enter_fds if self._cgroup else ()
            spawn["preexec_fn"] = make_preexec(limits, cgroup_fds, self._seccomp_address())
        if iso.drop_privileges and not iso.unshare_flags:
            spawn.update(user=self._uid, group=self._gid, extra_groups=[])
        loop = asyncio.get_running_loop()
        creating = asyncio.ensure_future(
            loop.subprocess_exec(
                lambda: CommandProtocol(limits.max_output_bytes, limits.kill_output_bytes),
                *argv,
                stdin=subprocess.PIPE if with_stdin else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                cwd=self._workdir,
                env=self.environment(),
                start_new_session=True,
                **spawn,
            )
        )
        try:
            transport, protocol = await asyncio.shield(creating)
        except asyncio.CancelledError:
            # Cancelled while asyncio was still wiring up the pipes: the process exists already,
            # and asyncio's own cleanup would kill only the first process, not the tree.
            with contextlib.suppress(Exception):
                transport, protocol = await creating
                orphan = RunningCommand(transport, protocol)
                await orphan.terminate()
                transport.close()
            raise
        except (OSError, subprocess.SubprocessError) as exc:
            raise SandboxError(f"could not start command: {exc}") from exc
        finally:
            if seccomp_read is not None:
                if not creating.done():
                    with contextlib.suppress(BaseException):
                        await creating  # the child must have its copy before ours is closed
                os.close(seccomp_read)
        return RunningCommand(transport, protocol)


async def _to_the_end(awaitable: Awaitable[T]) -> T:
    """Await `awaitable` to its end even when the caller is cancelled meanwhile; the cancellation
    is raised once it has ended. A plain `await asyncio.shield(...)` returns at the first
    cancellation and leaves the work as an orphan task, which the CLI's stop sweep (or
    `asyncio.run`'s) then cancels: a rollout stopped while closing its sandbox left the directory
    on disk (seen in CI, tests/unit/test_cli_lifecycle.py)."""
    task = asyncio.ensure_future(awaitable)
    cancelled: asyncio.CancelledError | None = None
    while True:
        try:
            result = await asyncio.shield(task)
        except asyncio.CancelledError as error:
            if task.done():  # the work itself was cancelled: nothing left to wait for
                raise
            cancelled = error
            continue
        if cancelled is not None:
            raise cancelled
        return result


async def _discard_cgroup(grouping: asyncio.Future) -> None:
    with contextlib.suppress(BaseException):
        group = await grouping
        if group is not None:
            await asyncio.to_thread(group.close)


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
    is root, the container is a tmpfs of `quota_mb` MiB (see environments/rollout/sandbox/disk.py). The
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
            write_etc(container, uid, gid, workdir)  # for the bubblewrap root
        dir_fd = os.open(workdir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except BaseException:
        remove_container(container)
        raise
    return container, workdir, dir_fd
