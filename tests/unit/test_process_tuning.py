"""The env's process tuning after start-up (`hermes_opd/runtime/process_tuning.py`)."""

from __future__ import annotations

import gc
import subprocess
import sys

from hermes_opd.runtime.process_tuning import freeze_startup_heap


def test_the_start_up_heap_is_frozen():
    gc.unfreeze()
    try:
        frozen = freeze_startup_heap()
        assert frozen > 1000
        # A frozen object that dies leaves the permanent generation, so the count can only fall (a CI
        # run: 1028899 returned, 1028897 a moment later); nothing alive is left to collect.
        assert frozen - 1000 < gc.get_freeze_count() <= frozen
    finally:
        gc.unfreeze()


def test_frozen_objects_are_still_finalized_at_exit():
    """A cyclic object frozen at start-up has its finalizer run at interpreter exit (twice frozen,
    unfrozen once): what extension modules count on to not report leaks."""
    code = (
        "from hermes_opd.runtime.process_tuning import freeze_startup_heap\n"
        "class Cycle:\n"
        "    def __init__(self): self.me = self\n"
        "    def __del__(self): print('finalized', flush=True)\n"
        "keep = Cycle(); del keep\n"  # garbage in a cycle, collected by the freeze's gc.collect()...
        "alive = Cycle()\n"  # ...while this one is alive, gets frozen, and is dropped afterwards
        "freeze_startup_heap(); freeze_startup_heap()\n"
        "del alive\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("finalized") == 2


def test_freed_heap_goes_back_to_the_os():
    """Many mid-sized objects (malloc's heap, not mmap) freed: glibc keeps their pages until
    `return_free_heap`, which returns them."""
    code = (
        "import re\n"
        "from hermes_opd.runtime.process_tuning import return_free_heap\n"
        "def rss():\n"
        "    return int(re.search(r'VmRSS:\\s+(\\d+)', open('/proc/self/status').read())[1]) // 1024\n"
        "base = rss()\n"
        "held = [bytes(600) + i.to_bytes(4, 'little') for i in range(300_000)]\n"
        "peak = rss()\n"
        "del held\n"
        "kept = rss()\n"
        "returned = return_free_heap()\n"
        "print(base, peak, kept, rss(), returned)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    base, peak, kept, after, returned = out.stdout.split()
    base, peak, kept, after = int(base), int(peak), int(kept), int(after)
    assert peak - base > 150  # MiB held
    assert kept - base > 100, "glibc returned the pages by itself: this test no longer shows anything"
    assert returned == "True" and after - base < 30
