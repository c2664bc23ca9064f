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
        assert frozen == gc.get_freeze_count() > 1000
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
