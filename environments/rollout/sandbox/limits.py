"""The sandbox's value types: its limits, what one command did, and its error.

Kept apart from `environments/rollout/sandbox/sandbox.py` (the sandbox itself) and `environments/rollout/sandbox/isolation.py`
(how a command is confined), which both use them.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from hermes_opd.contract.errors import HermesOPDError

NOBODY_UID = 65534
NOBODY_GID = 65534
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
        description="RLIMIT_NPROC for the sandbox user (processes and threads), and the pids limit of "
        "the sandbox's cgroup (its own count, whatever the uid). Without a cgroup and with user='nobody' "
        "the count is shared by all sandboxes running at the same time.",
    )
    cgroup: Literal["auto", "v1", "v2", "off"] = Field(
        "auto",
        description="A control group per sandbox (environments/rollout/sandbox/cgroup.py): 'auto' uses cgroup v2 "
        "when it can delegate controllers here, else v1; 'off' runs without (a loud warning says what is "
        "then not enforced).",
    )
    cpu_cores: float = Field(
        1.0,
        gt=0,
        le=1024,
        description="CPU quota of the whole sandbox, in cores (cgroup cpu.max / cfs_quota).",
    )
    cpu_weight: int = Field(
        100,
        ge=1,
        le=10_000,
        description="The sandbox's CPU share under contention (cgroup v2 cpu.weight; v1 cpu.shares = "
        "weight * 1024 / 100). Every sandbox weighs the same however many processes or sessions it makes.",
    )
    memory_total_mb: int = Field(
        2048,
        ge=64,
        description="Memory of all the sandbox's processes together, in MiB (cgroup memory.max / "
        "limit_in_bytes): the kernel's OOM killer acts inside the sandbox when it is exceeded.",
    )
    root_builder: Literal["auto", "bwrap", "shell"] = Field(
        "auto",
        description="Who builds the allow-list root of each command (root only): 'auto' uses bubblewrap "
        "(`bwrap`, one process) when installed, else a root-side shell script (about forty processes).",
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
    cpu_exceeded: bool = False
    """Killed because all its processes together (forks included) used more than the command's CPU
    budget (`Sandbox.run(cpu_time_s=...)`, measured by the sandbox's cgroup)."""


class SandboxError(HermesOPDError, RuntimeError):
    """The sandbox could not be set up or was used after it was closed."""
