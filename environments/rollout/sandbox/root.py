"""The allow-list root a sandbox command sees: what is in it, and the root-side script that builds it.

Each command starts in new mount, PID, IPC, UTS and network namespaces (see `environments/rollout/sandbox/sandbox.py`).
There, still as root, `ROOT_SETUP` mounts a small tmpfs as the new `/`, and puts in it only:

- read-only bind mounts of the directories in `RootPlan.binds`: the shell and core tools
  (`/usr/bin`), the shared libraries, the locale data, and the sandbox interpreter's own standard
  library; every `site-packages`/`dist-packages` inside them (found when the plan is made, and
  checked again at each command inside the interpreter's stdlib directories) is covered by an empty
  read-only tmpfs (an installed copy of this package would live there), and so is every hidden
  path inside them;
- the top-level links of a merged-/usr system (`/bin -> usr/bin`, ...);
- a small `/etc` written fresh (`passwd`, `group`, `hosts`) plus read-only `ld.so.cache`,
  `localtime` and the `alternatives` links;
- `/dev/null`, `/dev/zero`, `/dev/full`, `/dev/random`, `/dev/urandom` (bind mounts of the host's
  device nodes) and the `/dev/fd`, `/dev/std*` links;
- a fresh `/proc` of the command's own PID namespace;
- the sandbox's working directory, at its own absolute path, and its private temp directory on
  `/tmp`, `/var/tmp` and `/dev/shm`: the only writable places, both inside the sandbox's
  size-limited container.

Then it `pivot_root`s into it, detaches the old root (nothing of the host's tree stays reachable,
not even through `/proc/1/root`), remounts `/` read-only, and execs the command as the sandbox user.
Whatever is not in the plan does not exist for the command: other checkouts or installed copies of
the package, task datasets, other sandboxes, and world-writable host directories such as `/run/lock`.
"""

from __future__ import annotations

import functools
import glob
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

_TOP_LEVEL_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
_SYSTEM_DIRS = (
    "/usr/bin",
    "/usr/lib64",
    "/usr/lib32",
    "/usr/libx32",
    "/usr/lib/locale",
    "/usr/share/zoneinfo",
)
_MULTIARCH_GLOB = "/usr/lib/*-linux-gnu*"
_PACKAGE_DIR_NAMES = ("site-packages", "dist-packages")


@dataclass(frozen=True)
class RootPlan:
    """What the allow-list root contains (computed once per process, see `root_plan`)."""

    binds: tuple[str, ...]
    """Absolute host directories bind-mounted read-only at the same path."""
    links: tuple[tuple[str, str], ...]
    """(name at the top of the root, link target) for a merged-/usr layout."""
    masks: tuple[str, ...]
    """Directories inside `binds` that are covered by an empty read-only tmpfs."""
    etc_files: tuple[str, ...]
    """Host files under /etc bind-mounted read-only (when present)."""
    package_roots: tuple[str, ...] = ()
    """Directories (the interpreter's stdlib) whose site-packages/dist-packages are masked too
    when they appear after the plan was made."""


def _python_paths(python: str) -> list[str]:
    """The directories the sandbox interpreter needs: its own bin directory, stdlib, platstdlib and
    lib-dynload (asked from the interpreter itself, in isolated mode)."""
    exe = shutil.which(python, path="/usr/local/bin:/usr/bin:/bin")
    if not exe:
        return []
    probe = (
        "import json, sys, sysconfig; p = sysconfig.get_paths();"
        "print(json.dumps([sys.executable, p['stdlib'], p['platstdlib'],"
        " [x for x in sys.path if x.endswith('lib-dynload')]]))"
    )
    try:
        done = subprocess.run([exe, "-I", "-c", probe], capture_output=True, timeout=30, check=True)
        executable, stdlib, platstdlib, dynload = json.loads(done.stdout)
    except (OSError, subprocess.SubprocessError, ValueError):
        return []
    return [
        str(Path(executable).resolve().parent),
        str(Path(exe).parent),
        stdlib,
        platstdlib,
        *dynload,
    ]


def _covered(path: str, dirs: list[str]) -> bool:
    return any(path == d or path.startswith(d.rstrip("/") + "/") for d in dirs)


def build_root_plan(python: str = "python3") -> RootPlan:
    """Scan this machine once: which system directories exist and where the interpreter lives."""
    links: list[tuple[str, str]] = []
    binds: list[str] = []
    for name in _TOP_LEVEL_LINKS:
        top = f"/{name}"
        if os.path.islink(top):
            links.append((name, os.readlink(top)))
        elif os.path.isdir(top) and name in ("bin", "lib", "lib64"):
            binds.append(top)  # not a merged-/usr system: the real directories
    python = _python_paths(python)
    candidates = [*_SYSTEM_DIRS, *sorted(glob.glob(_MULTIARCH_GLOB)), *python]
    for path in candidates:
        real = os.path.realpath(path)
        if os.path.isdir(real) and not os.path.islink(path) and not _covered(real, binds):
            binds = [b for b in binds if not _covered(b, [real])] + [real]
    masks: list[str] = []
    for base in binds:
        for name in _PACKAGE_DIR_NAMES:
            for found in glob.glob(os.path.join(base, name)) + glob.glob(os.path.join(base, "*", name)):
                if os.path.isdir(found) and not os.path.islink(found):
                    masks.append(found)
    etc_files = tuple(
        f for f in ("/etc/ld.so.cache", "/etc/localtime", "/etc/nsswitch.conf") if os.path.isfile(f)
    )
    roots = tuple(sorted({os.path.realpath(p) for p in python[2:4] if _covered(os.path.realpath(p), binds)}))
    return RootPlan(tuple(binds), tuple(links), tuple(sorted(set(masks))), etc_files, roots)


@functools.cache
def root_plan() -> RootPlan:
    return build_root_plan()


def setup_args(plan: RootPlan, hidden: tuple[str, ...]) -> list[str]:
    """The variable part of `ROOT_SETUP`'s arguments: counted lists of binds, links and masks."""
    args = [str(len(plan.binds)), *plan.binds]
    args += [str(len(plan.links)), *(part for link in plan.links for part in link)]
    masks = [*plan.masks, *(h for h in hidden if _covered(h, list(plan.binds)))]
    args += [str(len(masks)), *masks]
    args += [str(len(plan.package_roots)), *plan.package_roots]
    args += [str(len(plan.etc_files)), *plan.etc_files]
    return args


ROOT_SETUP = r"""
set -e
R="$1"; W="$2"; T="$3"; SETPRIV="$4"; PD="$5"; PIVOT="$6"; U="$7"; G="$8"; shift 8
mount -t tmpfs -o size=2m,nr_inodes=4096,mode=755,nosuid,nodev hermes-sbx-root "$R"
N="$1"; shift
while [ "$N" -gt 0 ]; do
  mkdir -p "$R$1"; mount --bind -o ro,nosuid,nodev "$1" "$R$1"
  shift; N=$((N - 1))
done
N="$1"; shift
while [ "$N" -gt 0 ]; do ln -s "$2" "$R/$1"; shift 2; N=$((N - 1)); done
mask() { mount -t tmpfs -o size=4k,nr_inodes=2,mode=555,ro,nosuid,nodev hermes-sbx-mask "$1"; }
N="$1"; shift
while [ "$N" -gt 0 ]; do
  if [ -d "$R$1" ] && [ ! -L "$R$1" ]; then mask "$R$1"; fi
  shift; N=$((N - 1))
done
N="$1"; shift
while [ "$N" -gt 0 ]; do
  for d in "$R$1/site-packages" "$R$1/dist-packages"; do
    if [ -d "$d" ] && [ ! -L "$d" ] && ! grep -q " $d " /proc/self/mountinfo; then mask "$d"; fi
  done
  shift; N=$((N - 1))
done
mkdir -p "$R/etc" "$R/dev/shm" "$R/proc" "$R/tmp" "$R/var/tmp"
N="$1"; shift
while [ "$N" -gt 0 ]; do : > "$R$1"; mount --bind -o ro "$1" "$R$1"; shift; N=$((N - 1)); done
if [ -d /etc/alternatives ]; then
  mkdir "$R/etc/alternatives"; mount --bind -o ro,nosuid,nodev /etc/alternatives "$R/etc/alternatives"
fi
printf 'root:x:0:0:root:/:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/sh\n' > "$R/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' > "$R/etc/group"
if [ "$U" != 65534 ]; then
  printf 'sandbox:x:%s:%s:sandbox:%s:/bin/sh\n' "$U" "$G" "$W" >> "$R/etc/passwd"
  printf 'sandbox:x:%s:\n' "$G" >> "$R/etc/group"
fi
printf '127.0.0.1 localhost\n::1 localhost\n' > "$R/etc/hosts"
for d in null zero full random urandom; do : > "$R/dev/$d"; mount --bind "/dev/$d" "$R/dev/$d"; done
ln -s /proc/self/fd "$R/dev/fd"
ln -s /proc/self/fd/0 "$R/dev/stdin"; ln -s /proc/self/fd/1 "$R/dev/stdout"; ln -s /proc/self/fd/2 "$R/dev/stderr"
mount -t proc -o nosuid,nodev,noexec proc "$R/proc"
for d in /tmp /var/tmp /dev/shm; do mount --no-canonicalize --bind "$T" "$R$d"; done
mkdir -p "$R$W" "$R/.old"
mount --no-canonicalize --bind "$W" "$R$W"
cd "$R"
"$PIVOT" . .old
umount -l /.old
rmdir /.old
mount -o remount,bind,ro,nosuid,nodev /
cd "$W"
exec "$SETPRIV" --reuid="$U" --regid="$G" --clear-groups $PD -- "$@"
"""
"""Runs as root inside the command's new namespaces. Arguments: the root mountpoint, the working
directory, the private temp directory, the setpriv path, setpriv's parent-death flag (`--pdeathsig=KILL`,
or empty where setpriv lacks it), the pivot_root path, uid, gid, then `setup_args(...)`, then the
command's argv. With the flag, the command (the PID namespace's init) is killed when `unshare`
dies, and the kernel then kills everything else in the namespace."""
