"""`hermes-opd process`'s progress says what the collection waits for, without a bar. What `send` says
while it waits: tests/reliability/test_send_waits.py."""

from __future__ import annotations

import time


def test_process_progress_says_what_the_collection_waits_for_without_a_bar():
    import io

    from hermes_opd.commands.progress import Progress

    stream = io.StringIO()
    progress = Progress(target=3, done=1, stream=stream, mode="lines")
    progress.still_waiting(2, time.monotonic() - 12)
    assert stream.getvalue() == (
        "[1/3] collecting: 2 group(s) in flight (rollouts, then the judge and the teacher), "
        "none finished in the last 12 s\n"
    )
    quiet = io.StringIO()
    Progress(target=3, done=0, stream=quiet, mode="none").still_waiting(1, time.monotonic())
    assert quiet.getvalue() == ""
