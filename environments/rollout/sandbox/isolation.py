"""How one sandbox command is confined: the namespaces wrapper and the child-side limits.

- `detect_isolation` finds, once per process, the strongest confinement this machine supports
  (an allow-list root in mount, PID, IPC, UTS and network namespaces when root; weaker wrappers
  otherwise), and logs what degrades;
- `Isolation.wrapper` is the argv prefix that applies it to a command;
- `make_preexec` is what the forked child does before exec: rlimits, no_new_privs, and the
  parent-death signal that ties the command to the env that started it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import dataclasses
import functools
import logging
import os
import resource
import shutil
import signal
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from environments.rollout.sandbox.bwrap import bwrap_argv, write_etc
from environments.rollout.sandbox.limits import NOBODY_GID, NOBODY_UID, SandboxLimits
from environments.rollout.sandbox.root import ROOT_SETUP, RootPlan, root_plan, setup_args

log = logging.getLogger("environments.rollout.sandbox.sandbox")  # one logger for the sandbox's warnings

BASH = "/bin/bash"
SH = "/bin/sh"


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
    package = Path(__file__).resolve().parents[2]  # environments/ (this file: rollout/sandbox/isolation.py)
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
    """When set, commands see only the allow-list root of `environments/rollout/sandbox/root.py`."""
    bwrap_path: str = ""
    """When set (with `root`), bubblewrap builds that root in one process
    (environments/rollout/sandbox/bwrap.py) instead of the root-side shell script."""
    prlimit_path: str = ""
    """With bubblewrap: util-linux `prlimit`, which sets the rlimits so that no `preexec_fn` is needed."""

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
        seccomp_fd: int | None = None,
    ) -> list[str]:
        """The argv prefix that confines a command; the command's own argv follows it. `rootdir`:
        an empty directory the allow-list root is mounted on (inside the command's namespace).
        `seccomp_fd`: bubblewrap only, a descriptor holding the seccomp program."""
        if not self.unshare_flags:
            return []
        if (
            self.root is not None
            and uid is not None
            and gid is not None
            and rootdir is not None
            and self.bwrap_path
        ):
            return bwrap_argv(
                bwrap=self.bwrap_path,
                setpriv=self.setpriv_path,
                death_flag=_setpriv_death_flag(self.setpriv_path),
                namespaces=self.unshare_flags,
                plan=self.root,
                hidden=hidden,
                container=rootdir.parent,  # the sandbox's container holds `root` and the /etc files
                workdir=workdir,
                tmpdir=tmpdir,
                uid=uid,
                gid=gid,
                seccomp_fd=seccomp_fd,
            )
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


_isolation_cache: dict[tuple[bool, str], Isolation] = {}
_isolation_lock = threading.Lock()


def detect_isolation(allow_network: bool, root_builder: str = "auto") -> Isolation:
    """Find the strongest confinement this machine supports; cached; logs a warning if degraded.
    `root_builder`: "auto" (bubblewrap when installed, else the shell script), "bwrap" or "shell"."""
    key = (allow_network, root_builder)
    with _isolation_lock:
        if key not in _isolation_cache:
            _isolation_cache[key] = _probe_isolation(allow_network, root_builder)
        return _isolation_cache[key]


def _probe_isolation(allow_network: bool, root_builder: str = "auto") -> Isolation:
    is_root = os.geteuid() == 0
    net = () if allow_network else ("--net",)
    unshare = shutil.which("unshare") or ""
    setpriv = shutil.which("setpriv") or ""
    candidates: list[Isolation] = []
    if unshare and is_root:
        full = (*net, "--pid", "--fork", "--mount-proc")
        pivot_root = shutil.which("pivot_root") or shutil.which("pivot_root", path="/usr/sbin:/sbin") or ""
        bwrap = shutil.which("bwrap") or ""
        if setpriv and bwrap and root_builder in ("auto", "bwrap"):
            plan = root_plan()
            for extra in (("--ipc", "--uts", "--cgroup"), ("--ipc", "--uts")):
                flags = (*net, *extra, "--pid", "--fork", "--mount")
                prlimit = shutil.which("prlimit") or ""
                candidates.append(
                    Isolation(
                        unshare,
                        flags,
                        True,
                        True,
                        True,
                        True,
                        setpriv,
                        "",
                        plan,
                        bwrap_path=bwrap,
                        prlimit_path=prlimit,
                    )
                )
        elif root_builder == "bwrap":
            log.warning(
                "sandbox: bubblewrap (bwrap) not found; the allow-list root is built by a shell script"
            )
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
        if uid is not None and gid is not None:
            write_etc(Path(probe_dir), uid, gid, Path(probe_dir))
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
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2


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


_PRLIMIT_NAMES = {
    resource.RLIMIT_CPU: "cpu",
    resource.RLIMIT_AS: "as",
    resource.RLIMIT_FSIZE: "fsize",
    resource.RLIMIT_NPROC: "nproc",
    resource.RLIMIT_NOFILE: "nofile",
    resource.RLIMIT_CORE: "core",
}


def prlimit_args(limits: SandboxLimits) -> list[str]:
    """The same rlimits as `make_preexec` sets, as util-linux `prlimit` options (soft:hard)."""
    return [f"--{_PRLIMIT_NAMES[which]}={soft}:{hard}" for which, (soft, hard) in _rlimits(limits)]


def make_preexec(limits: SandboxLimits, cgroup_fds: tuple[int, ...] = (), seccomp: int | None = None):
    """A preexec_fn that only makes plain system calls (safe enough after fork in a threaded parent).
    `cgroup_fds`: open `cgroup.procs` files of the sandbox's cgroup; the child joins it first, so
    everything it (and what it starts) does is counted and limited there. If joining fails the
    command does not start. `seccomp`: the address of a filter program (environments/rollout/sandbox/seccomp.py),
    installed after no_new_privs; if the kernel refuses it the command does not start."""
    rlimits = _rlimits(limits)
    prctl = _prctl
    setrlimit = resource.setrlimit
    write = os.write

    def preexec() -> None:
        for fd in cgroup_fds:
            write(fd, b"0")
        for which, value in rlimits:
            setrlimit(which, value)
        if prctl is not None:
            prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
            # Dies with the env (the thread that started it): a killed env leaves no command running.
            prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            if seccomp is not None and prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, seccomp, 0, 0) != 0:
                raise OSError(ctypes.get_errno(), "seccomp filter refused")

    return preexec
