"""The allow-list root built by bubblewrap (`bwrap`) in one process, instead of the root-side shell
script of environments/rollout/sandbox/root.py (about forty `mount`, `mkdir` and `ln` processes per command).

The root is the same `RootPlan` (environments/rollout/sandbox/root.py): read-only binds of the system
directories and the interpreter's stdlib, every site-packages/dist-packages and hidden path
inside them covered by an empty read-only tmpfs, the merged-/usr links, a small `/etc`, a minimal
`/dev` (bwrap's own: null, zero, full, random, urandom, tty and the fd links), a fresh `/proc` of
the command's PID namespace, the sandbox's private temp directory on `/tmp`, `/var/tmp` and
`/dev/shm`, and its working directory at its own path; then `/` is remounted read-only and the
command runs as the sandbox user through setpriv. bwrap runs as root here, without a user
namespace; it applies nosuid (and nodev, except to /dev) to every bind.

`passwd`, `group` and `hosts` are written once per sandbox (`write_etc`) into its container,
which commands cannot see, and bound read-only.
"""

from __future__ import annotations

import os
from pathlib import Path

from environments.rollout.sandbox.limits import NOBODY_UID
from environments.rollout.sandbox.root import RootPlan

ETC_DIR = "etc"
"""Inside the sandbox's container: the /etc files written for its commands."""
_NAMESPACES = {
    "--net": "--unshare-net",
    "--ipc": "--unshare-ipc",
    "--uts": "--unshare-uts",
    "--cgroup": "--unshare-cgroup",
}
_MASK_BYTES = 4096


def write_etc(container: Path, uid: int, gid: int, workdir: Path) -> None:
    """The sandbox's passwd, group and hosts (root's files, mode 0644)."""
    etc = container / ETC_DIR
    etc.mkdir(mode=0o755, exist_ok=True)
    passwd = "root:x:0:0:root:/:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/sh\n"
    group = "root:x:0:\nnogroup:x:65534:\n"
    if uid != NOBODY_UID:
        passwd += f"sandbox:x:{uid}:{gid}:sandbox:{workdir}:/bin/sh\n"
        group += f"sandbox:x:{gid}:\n"
    for name, text in (
        ("passwd", passwd),
        ("group", group),
        ("hosts", "127.0.0.1 localhost\n::1 localhost\n"),
    ):
        (etc / name).write_text(text, encoding="utf-8")
        os.chmod(etc / name, 0o644)


def _covered(path: str, dirs: tuple[str, ...]) -> bool:
    return any(path == d or path.startswith(d.rstrip("/") + "/") for d in dirs)


def masks_now(plan: RootPlan, hidden: tuple[str, ...]) -> list[str]:
    """The directories to cover with an empty tmpfs for this command: the plan's, the hidden paths
    inside the binds, and package directories that appeared in the interpreter's stdlib since the
    plan was made."""
    masks = [*plan.masks, *(h for h in hidden if _covered(h, plan.binds))]
    for root in plan.package_roots:
        for name in ("site-packages", "dist-packages"):
            found = os.path.join(root, name)
            if found not in masks and os.path.isdir(found) and not os.path.islink(found):
                masks.append(found)
    return [m for m in masks if os.path.isdir(m) and not os.path.islink(m)]


def bwrap_argv(
    *,
    bwrap: str,
    setpriv: str,
    death_flag: str,
    namespaces: tuple[str, ...],
    plan: RootPlan,
    hidden: tuple[str, ...],
    container: Path,
    workdir: Path,
    tmpdir: Path,
    uid: int,
    gid: int,
    seccomp_fd: int | None = None,
) -> list[str]:
    """The argv prefix (bwrap ... -- setpriv ... --) that runs a command in the allow-list root.
    `namespaces`: the unshare-style flags in use (`--net`, `--ipc`, `--uts`, `--cgroup`).
    `seccomp_fd`: a descriptor bwrap reads a seccomp program from (environments/rollout/sandbox/seccomp.py)."""
    argv = [bwrap, "--unshare-pid", *(_NAMESPACES[f] for f in namespaces if f in _NAMESPACES)]
    argv += ["--die-with-parent"]
    if seccomp_fd is not None:
        argv += ["--seccomp", str(seccomp_fd)]
    made: set[str] = {"/"}

    def parents(dest: str) -> None:
        # bwrap makes missing parents mode 0700 (as root): make them 0755, so the sandbox user can
        # traverse them.
        for parent in reversed(Path(dest).parents):
            if str(parent) not in made:
                made.add(str(parent))
                argv.extend(["--perms", "0755", "--dir", str(parent)])

    for bind in plan.binds:
        parents(bind)
        argv += ["--ro-bind", bind, bind]
    for name, target in plan.links:
        argv += ["--symlink", target, f"/{name}"]
    for mask in masks_now(plan, hidden):
        argv += ["--perms", "0555", "--size", str(_MASK_BYTES), "--tmpfs", mask, "--remount-ro", mask]
    made.add("/etc")
    argv += ["--perms", "0755", "--dir", "/etc"]
    for name in ("passwd", "group", "hosts"):
        argv += ["--ro-bind", str(container / ETC_DIR / name), f"/etc/{name}"]
    for path in plan.etc_files:
        parents(path)
        argv += ["--ro-bind", path, path]
    if os.path.isdir("/etc/alternatives"):
        argv += ["--ro-bind", "/etc/alternatives", "/etc/alternatives"]
    argv += ["--dev", "/dev", "--proc", "/proc"]
    made.update(("/dev", "/proc"))
    for path in ("/tmp", "/var/tmp", "/dev/shm"):
        parents(path)
        argv += ["--bind", str(tmpdir), path]
        made.add(path)
    parents(str(workdir))
    argv += ["--bind", str(workdir), str(workdir), "--remount-ro", "/", "--chdir", str(workdir)]
    argv += ["--", setpriv, f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--no-new-privs"]
    if death_flag:
        argv.append(death_flag)
    argv.append("--")
    return argv


CGROUP_JOIN = 'while [ "$1" != "--" ]; do echo 0 > "$1" || exit 126; shift; done; shift; exec "$@"'
"""Run by `sh` as root before anything else of the command: write itself into each `cgroup.procs`
given (moving the writer), then exec the rest, which inherits the group. If a write fails, the
command ends with status 126 before anything of it ran."""


def launcher_argv(sh: str, prlimit: str, cgroup_procs: list[str], rlimits: list[str]) -> list[str]:
    """What runs before bwrap when no Python `preexec_fn` is used (a `preexec_fn` forces a full
    `fork` of the env process, about 28 ms here; without one, `vfork` is used): join the cgroup
    (`CGROUP_JOIN`), then `prlimit` sets the rlimits and execs bwrap."""
    head = [sh, "-c", CGROUP_JOIN, "sh", *cgroup_procs, "--"] if cgroup_procs else []
    return [*head, prlimit, *rlimits, "--"]
