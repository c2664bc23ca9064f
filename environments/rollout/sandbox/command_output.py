"""A sandboxed command's output, bounded and read as it arrives, and the handle of its process.
No backpressure on the pipe (so a command never blocks on a full pipe) and bounded memory: the first
and last halves of `max_output_bytes` are kept, the rest counted."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from environments.rollout.sandbox.process_tree import terminate_process_tree


class BoundedOutput:
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


class CommandProtocol(asyncio.SubprocessProtocol):
    """Collects a command's output as it arrives (no backpressure, bounded memory) and signals
    exit, end of output, and output floods through futures."""

    def __init__(self, max_output_bytes: int, kill_output_bytes: int) -> None:
        loop = asyncio.get_running_loop()
        self.output = BoundedOutput(max_output_bytes)
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
class RunningCommand:
    transport: asyncio.SubprocessTransport
    protocol: CommandProtocol

    @property
    def pid(self) -> int:
        return self.transport.get_pid()

    async def terminate(self) -> None:
        await terminate_process_tree(self.pid, self.protocol.exited)
