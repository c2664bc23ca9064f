"""When the proxy returns freed memory to the OS (`environments/proxy/memory_return.py`): only once
enough large work has finished since the last return, off the event loop."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

from environments.proxy import memory_return
from environments.proxy.memory_return import FreedMemoryReturn


def test_due_only_after_enough_new_work():
    finished = [0]
    returner = FreedMemoryReturn(ThreadPoolExecutor(1), lambda: finished[0], after_bytes=100)
    assert not returner.due()
    finished[0] = 99
    assert not returner.due()
    finished[0] = 150
    assert returner.due()
    assert not returner.due()  # nothing new since
    finished[0] = 249
    assert not returner.due()
    finished[0] = 250
    assert returner.due()


async def test_run_returns_in_a_worker_thread(monkeypatch):
    threads: list[str] = []
    monkeypatch.setattr(
        memory_return, "return_free_heap", lambda: threads.append(threading.current_thread().name)
    )
    finished = [10**9]
    with ThreadPoolExecutor(1, thread_name_prefix="planner") as pool:
        returner = FreedMemoryReturn(pool, lambda: finished[0], after_bytes=1)
        task = asyncio.create_task(returner.run(every_s=0.01))
        while returner.returns < 1:
            await asyncio.sleep(0.01)
        task.cancel()
    assert threads and threads[0].startswith("planner")
    assert threading.current_thread().name not in threads
