"""Nothing lost on the way to the Atropos API: a disk spool behind `BaseEnv._send_scored_data_to_api`.

atroposlib 0.4.0 posts each group to `/scored_data` (or a list to `/scored_data_list`) with three
tenacity attempts; after that, `handle_send_to_api` logs "Failed to send ... after retries" and the
group is gone, and a 4xx answer is dropped without an exception at all. The env replaces that one
method with `SendSpool.send` (the env owns one `SendSpool`):

- transient failures (connection refused or dropped, timeouts, 5xx, 408, 429) are retried with
  exponential backoff; if the last attempt fails too, the payload is written to the spool as a
  new segment file, durably (temporary file, fsync, rename, fsync of the directory);
- every later send first resends the spool, oldest segment first; a segment is deleted only
  after the API answered 2xx for it, and new groups queue behind older ones while the spool is not
  empty;
- a permanent rejection (another 4xx, e.g. 422 for a group the API's schema refuses) would never
  succeed on retry, so the payload goes to `<spool>/rejected/` with the reason next to it, and
  does not block the queue;
- before any POST the spool asks `GET /info` whether a trainer has registered. A restarted
  atroposlib API that receives `/scored_data` before the trainer's `/register` never initialises
  its state (`/register` skips it once the queue exists), and `/batch` then answers "Trainer not
  registered" for good. While `/info` says batch_size -1, groups are spooled instead;
- `get_status` survives an API restart: a restarted API has forgotten the env (`/status-env`
  answers 500, which ends BaseEnv's `env_manager` loop), so the env registers again
  (`register_again_until_back`), waiting
  with backoff until the API and a trainer are back.

Spool layout (default `./spool/<env name>`, or the config's `spool_dir`)::

    <spool>/<time_ns>-<pid>-<seq>.jsonl     one failed send: one group (ScoredDataGroup) per line
    <spool>/rejected/<name>.jsonl           groups the API refused (4xx), with <name>.reason.txt
    <spool>/.flush.lock                     flock held while a process resends the spool

Segments are ordinary groups JSONL, so `hermes-opd validate` and `hermes-opd inspect` read them.
Several env processes may share one spool directory: segment names are unique and only one
process resends at a time (flock), so no group is sent twice by two processes.

Delivery is at least once. Spooling and deletion are atomic, so a crash never leaves a partial or
duplicated segment; the one window left is a crash after the API accepted a resent segment and
before the segment was deleted (microseconds), which would send that segment once more on restart.
Closing it would need an idempotency key in the API, which atroposlib does not have.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import itertools
import json
import logging
import os
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from environments.delivery.groups_file import group_line
from hermes_opd.contract.errors import HermesOPDError
from hermes_opd.runtime.processes import pid_alive
from hermes_opd.vllm_api.retry import RetryPolicy, retrying

logger = logging.getLogger(__name__)

TRANSIENT_STATUSES = frozenset({408, 425, 429})
"""4xx answers that may succeed when repeated; every 5xx is transient too."""


class APIUnavailableError(HermesOPDError, RuntimeError):
    """The API could not take the payload now (connection, timeout, 5xx, no trainer): retry later."""


class APIRejectedError(HermesOPDError, RuntimeError):
    """The API refused the payload (4xx): retrying the same bytes cannot succeed."""

    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"the Atropos API answered {status}: {body[:500]}")
        self.status = status
        self.body = body


@dataclass
class SpoolStats:
    """Counters of one env process (cumulative)."""

    sent_direct: int = 0
    """Groups accepted on their first send."""
    spooled: int = 0
    """Groups written to the spool."""
    resent: int = 0
    """Spooled groups the API accepted later."""
    rejected: int = 0
    """Groups the API refused (moved to rejected/)."""
    send_failures: int = 0
    """Failed POST attempts (each retry counts)."""
    last_error: str | None = None
    recovered_from_previous_run: int = 0
    """Segments found in the spool when it was first opened (left by an earlier process)."""
    errors: list[str] = field(default_factory=list)

    def as_metrics(self, pending_groups: int) -> dict[str, float]:
        return {
            "spool/sent_direct": float(self.sent_direct),
            "spool/spooled": float(self.spooled),
            "spool/resent": float(self.resent),
            "spool/rejected": float(self.rejected),
            "spool/send_failures": float(self.send_failures),
            "spool/pending_groups": float(pending_groups),
        }


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path, data: bytes) -> None:
    """Create `path` with `data` so that it either exists complete and durable, or not at all (a
    failed write removes its temporary file)."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()  # a failed write (a full disk) leaves nothing behind to fill the disk further
        raise
    _fsync_dir(path.parent)


# -- the Atropos API client: one POST, its retries, a GET; shared by the env (SendSpool) and the replay engine
PostJson = Callable[[aiohttp.ClientSession, str, Any], contextlib.AbstractAsyncContextManager[Any]]
"""`(session, url, payload) -> async context manager of the response` (e.g. `session.post`, or
`BaseEnv._post_json_with_compression`)."""


def _post_plain_json(session: aiohttp.ClientSession, url: str, payload: Any):
    return session.post(url, json=payload)


async def post_payload(
    base_url: str,
    payload: dict[str, Any] | list[dict[str, Any]],
    *,
    env_id: int | None,
    require_trainer: bool = True,
    timeout_s: float = 120.0,
    post_json: PostJson | None = None,
    session: aiohttp.ClientSession | None = None,
) -> None:
    """POST one group (`/scored_data`) or a list (`/scored_data_list`) once. Sets each group's
    `env_id`. Raises APIUnavailableError (retry later: connection, timeout, 5xx, 408/425/429, or no
    trainer registered yet when `require_trainer`) or APIRejectedError (another 4xx). `session`:
    reuse that one (its connections) instead of opening one for this call."""
    base = base_url.rstrip("/")
    post_json = post_json or _post_plain_json
    for group in payload if isinstance(payload, list) else [payload]:
        group["env_id"] = env_id  # the id of this registration, also for groups of an earlier one
    url = f"{base}/scored_data_list" if isinstance(payload, list) else f"{base}/scored_data"
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    try:
        async with contextlib.AsyncExitStack() as stack:
            if session is None:
                session = await stack.enter_async_context(aiohttp.ClientSession(timeout=timeout))
            if require_trainer:
                async with session.get(f"{base}/info") as resp:
                    if resp.status >= 500 or resp.status in TRANSIENT_STATUSES:
                        raise APIUnavailableError(f"{base}/info answered {resp.status}")
                    info = await resp.json(content_type=None) if resp.status == 200 else {}
                if isinstance(info, dict) and info.get("batch_size") == -1:
                    raise APIUnavailableError(
                        f"the Atropos API at {base} has no registered trainer (restarted?); "
                        "posting now would leave it unable to register one"
                    )
            async with post_json(session, url, payload) as resp:
                body = await resp.text()
                status = resp.status
    except APIUnavailableError:
        raise
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        raise APIUnavailableError(
            f"cannot reach the Atropos API at {base}: {type(exc).__name__}: {exc}"
        ) from exc
    if status >= 500 or status in TRANSIENT_STATUSES:
        raise APIUnavailableError(f"the Atropos API at {base} answered {status}: {body[:200]}")
    if status >= 400:
        raise APIRejectedError(status, body)


def api_session(timeout_s: float = 120.0) -> aiohttp.ClientSession:
    """A session for several calls to the Atropos API (its connections kept alive); close it."""
    return aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s))


async def get_api_json(session: aiohttp.ClientSession, base_url: str, route: str) -> dict[str, Any] | None:
    """`GET base_url + route` (`/info`, `/status`): the answer's JSON object, or None when the API
    does not answer, answers another status than 200, or answers something that is not an object."""
    try:
        async with session.get(base_url.rstrip("/") + route) as resp:
            if resp.status != 200:
                return None
            body = await resp.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, OSError, ValueError):
        return None
    return body if isinstance(body, dict) else None


async def post_with_retries(
    post_once: Callable[[Any], Awaitable[None]],
    payload: Any,
    stats: SpoolStats,
    *,
    attempts: int = 3,
    backoff_s: float = 1.0,
    backoff_max_s: float = 10.0,
) -> None:
    """`post_once(payload)` up to `attempts` times while it raises APIUnavailableError, on the one
    retry policy (exponential backoff with jitter); counts failures in `stats`. Re-raises the last
    failure."""

    async def attempt() -> None:
        try:
            await post_once(payload)
        except APIUnavailableError as exc:
            stats.send_failures += 1
            stats.last_error = str(exc)
            raise

    policy = RetryPolicy(max(1, int(attempts)), backoff_s, backoff_max_s)
    await retrying(attempt, policy, lambda exc: isinstance(exc, APIUnavailableError))


class GroupSpool:
    """The on-disk queue of one spool directory (synchronous; the mixin calls it off the event loop)."""

    SUFFIX = ".jsonl"

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.rejected_dir = self.directory / "rejected"
        self._counter = itertools.count()
        self.directory.mkdir(parents=True, exist_ok=True)
        self._remove_stale_temporaries()

    def _remove_stale_temporaries(self) -> None:
        """A `.tmp` file is a write that never reached its rename: its content was never spooled.
        Only those of dead processes (the pid is in the name) or older than an hour are removed:
        another live process sharing the directory may be writing one right now."""
        for path in self.directory.glob(".*.tmp"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                pid = int(path.name.lstrip(".").split("-")[1])
                if pid_alive(pid) and time.time() - path.stat().st_mtime < 3600:
                    continue
                path.unlink()

    # -- queue -----------------------------------------------------------------------------------
    def segments(self) -> list[Path]:
        """Pending segments, oldest first."""
        return sorted(p for p in self.directory.glob(f"*{self.SUFFIX}") if not p.name.startswith("."))

    def pending_groups(self) -> int:
        total = 0
        for path in self.segments():
            with contextlib.suppress(OSError):
                total += sum(1 for line in path.read_bytes().splitlines() if line.strip())
        return total

    def append(self, groups: list[dict[str, Any]]) -> Path:
        """Write `groups` as one new segment, durably. Returns its path."""
        name = f"{time.time_ns():020d}-{os.getpid()}-{next(self._counter):06d}{self.SUFFIX}"
        data = b"".join(group_line(group, allow_nan=True) for group in groups)
        path = self.directory / name
        write_atomically(path, data)
        return path

    @staticmethod
    def read(path: Path) -> list[dict[str, Any]]:
        """The groups of a segment. Raises ValueError when a line is not a JSON object."""
        groups = []
        for number, line in enumerate(path.read_bytes().splitlines(), start=1):
            if not line.strip():
                continue
            try:
                group = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path.name} line {number}: not JSON ({exc})") from None
            if not isinstance(group, dict):
                raise ValueError(f"{path.name} line {number}: not a JSON object")
            groups.append(group)
        return groups

    def remove(self, path: Path) -> None:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        _fsync_dir(self.directory)

    def reject(self, path: Path | None, groups: list[dict[str, Any]] | None, reason: str) -> Path:
        """Move a segment (or write `groups`) to rejected/, with the reason beside it."""
        self.rejected_dir.mkdir(exist_ok=True)
        name = path.name if path is not None else f"{time.time_ns():020d}-{os.getpid()}{self.SUFFIX}"
        target = self.rejected_dir / name
        write_atomically(target.with_name(target.name + ".reason.txt"), reason.encode("utf-8"))
        if path is not None:
            os.replace(path, target)
            _fsync_dir(self.rejected_dir)
            _fsync_dir(self.directory)
        else:
            write_atomically(target, b"".join(group_line(g, allow_nan=True) for g in groups or []))
        return target

    # -- one flusher per directory, across processes -----------------------------------------------
    @contextlib.contextmanager
    def flush_lock(self):
        """Yields True when this process holds the directory's flush lock, False if another does."""
        fd = os.open(self.directory / ".flush.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
            try:
                yield True
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)


@dataclass
class SpoolSettings:
    """Retries and checks of the send spool; tests lower the waits."""

    send_attempts: int = 3
    backoff_s: float = 1.0
    """First retry delay; doubles per attempt (with jitter), capped at `backoff_max_s`."""
    backoff_max_s: float = 10.0
    request_timeout_s: float = 120.0
    require_trainer: bool = True
    """Check `GET /info` (a trainer has registered) before posting; see the module docstring."""
    reregister_on_api_restart: bool = True
    """When `get_status` fails (a restarted API has forgotten this env: `/status-env` answers 500),
    register again and carry on, instead of ending BaseEnv's `env_manager` loop."""
    reregister_max_wait_s: float = 30.0


class SendSpool:
    """The env's way to the Atropos API, owned by the env: sends groups, spools what cannot be
    sent, resends the spool. Its state (the spool, a lock, the stats) is its own.

    `base_url()` and `env_id()` are read at each send (a re-registration changes the id); the spool
    directory is opened at the first send, so that an env that never sends creates nothing."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        base_url: Callable[[], str],
        env_id: Callable[[], Any],
        post_json: PostJson,
        settings: SpoolSettings | None = None,
    ) -> None:
        self.directory = Path(directory)
        self.settings = settings or SpoolSettings()
        self._base_url = base_url
        self._env_id = env_id
        self._post_json = post_json
        self._spool: GroupSpool | None = None
        self._stats: SpoolStats | None = None
        self._lock = asyncio.Lock()
        self._flush_again = False

    @property
    def opened(self) -> bool:
        """True once the spool directory has been opened (a send was attempted)."""
        return self._spool is not None

    @property
    def spool(self) -> GroupSpool:
        if self._spool is None:
            self._spool = GroupSpool(self.directory)
            self._stats = SpoolStats(recovered_from_previous_run=len(self._spool.segments()))
            if self._stats.recovered_from_previous_run:
                logger.warning(
                    "spool %s holds %d segment(s) from an earlier run; they are resent before new groups",
                    self._spool.directory,
                    self._stats.recovered_from_previous_run,
                )
        return self._spool

    @property
    def stats(self) -> SpoolStats:
        self.spool  # noqa: B018 - opening the spool counts what an earlier run left
        assert self._stats is not None
        return self._stats

    # -- sending ---------------------------------------------------------------------------------
    async def send(self, scored_data) -> None:
        """Send, or spool. Never raises for an unavailable or refusing API (groups are kept). Raises
        OSError only when the groups could be neither sent nor spooled (a full disk): then nothing
        was placed, and the caller may send them again."""
        spool, stats = self.spool, self.stats
        groups = list(scored_data) if isinstance(scored_data, list) else [scored_data]
        if not groups:
            return
        has_backlog = self._lock.locked() or bool(await asyncio.to_thread(spool.segments))
        if has_backlog:
            # Older groups wait in the spool: queue behind them, then try to drain everything.
            await self._spool_groups(groups, "older groups are still spooled")
            await self._flush_after_send()
            return
        try:
            await self._post_with_retries(scored_data)
        except APIRejectedError as exc:
            await self._reject(None, groups, exc)
            return
        except APIUnavailableError as exc:
            await self._spool_groups(groups, str(exc))
            return
        stats.sent_direct += len(groups)
        if await asyncio.to_thread(spool.segments):  # spooled by a concurrent send meanwhile
            await self._flush_after_send()

    async def _flush_after_send(self) -> None:
        """Resend the spool after `send` has placed its groups (sent or spooled). A failure here
        (a full disk while moving a segment) is logged, never raised: the groups are safe, and a
        caller that retried `send` on it would place them twice. The next flush tries again."""
        try:
            await self.flush()
        except OSError as exc:
            self.stats.last_error = str(exc)
            logger.warning(
                "resending the spool in %s failed (%s); it is tried again at the next flush",
                self.directory,
                exc,
            )

    async def flush(self) -> int:
        """Resend spooled segments, oldest first, until the spool is empty or a send fails.
        Returns how many groups were delivered. Safe to call at any time (e.g. at shutdown)."""
        spool, stats = self.spool, self.stats
        if self._lock.locked():
            # Another task of this process is flushing: have it list the segments once more.
            self._flush_again = True
            return 0
        delivered = 0
        async with self._lock:
            with spool.flush_lock() as held:
                if not held:
                    return 0
                while True:
                    self._flush_again = False
                    segments = await asyncio.to_thread(spool.segments)
                    if not segments:
                        if self._flush_again:
                            continue
                        return delivered
                    for path in segments:
                        try:
                            groups = await asyncio.to_thread(spool.read, path)
                        except FileNotFoundError:
                            continue
                        except (OSError, ValueError) as exc:
                            logger.error("spool segment %s is unreadable (%s); moved to rejected/", path, exc)
                            await asyncio.to_thread(spool.reject, path, None, f"unreadable: {exc}")
                            continue
                        if not groups:
                            await asyncio.to_thread(spool.remove, path)
                            continue
                        payload = groups if len(groups) > 1 else groups[0]
                        try:
                            await self._post_with_retries(payload)
                        except APIRejectedError as exc:
                            await self._reject(path, groups, exc)
                            continue
                        except APIUnavailableError as exc:
                            stats.last_error = str(exc)
                            logger.warning(
                                "Atropos API still unavailable (%s); %d spooled segment(s) kept in %s",
                                exc,
                                len(segments),
                                spool.directory,
                            )
                            return delivered
                        await asyncio.to_thread(spool.remove, path)
                        delivered += len(groups)
                        stats.resent += len(groups)
                        logger.info("resent %d spooled group(s) from %s", len(groups), path.name)

    # -- helpers ---------------------------------------------------------------------------------
    async def _spool_groups(self, groups: list[dict[str, Any]], reason: str) -> None:
        path = await asyncio.to_thread(self.spool.append, groups)
        self.stats.spooled += len(groups)
        self.stats.last_error = reason
        logger.warning("spooled %d group(s) to %s: %s", len(groups), path, reason)

    async def _reject(self, path: Path | None, groups: list[dict[str, Any]], exc: APIRejectedError) -> None:
        target = await asyncio.to_thread(self.spool.reject, path, groups, str(exc))
        self.stats.rejected += len(groups)
        self.stats.errors.append(str(exc)[:300])
        logger.error("the Atropos API refused %d group(s); kept in %s: %s", len(groups), target, exc)

    async def _post_with_retries(self, payload) -> None:
        settings = self.settings
        await post_with_retries(
            self._post_once,
            payload,
            self.stats,
            attempts=settings.send_attempts,
            backoff_s=settings.backoff_s,
            backoff_max_s=settings.backoff_max_s,
        )

    async def _post_once(self, payload) -> None:
        await post_payload(
            self._base_url(),
            payload,
            env_id=self._env_id(),
            require_trainer=self.settings.require_trainer,
            timeout_s=self.settings.request_timeout_s,
            post_json=self._post_json,
        )


async def register_again_until_back(register: Callable[[], Awaitable[Any]], max_wait_s: float) -> None:
    """Register with the Atropos API until it answers (the one retry policy, with no attempt limit
    and at most `max_wait_s` between tries): what `get_status` does after a restarted API forgot the
    env."""
    forever = RetryPolicy(max_attempts=sys.maxsize, base_delay_s=1.0, max_delay_s=max_wait_s)
    await retrying(
        register,
        forever,
        lambda exc: isinstance(exc, Exception),
        logger=logger,
        what="re-registering with the Atropos API",
    )
