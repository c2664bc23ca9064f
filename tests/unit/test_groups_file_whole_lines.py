"""A groups file line lands whole or not at all (environments/delivery/groups_file.py,
`append_whole`), a torn tail is cut back on open with its bytes saved aside (`repair_torn_tail`),
and the proxy's sink refuses a groups path it cannot write at start-up
(environments/proxy/group_sink.py). The full disk itself is in
tests/reliability/test_proxy_delivery_faults.py (a real tmpfs)."""

from __future__ import annotations

import asyncio
import errno
import os

import pytest

from environments.delivery import groups_file
from environments.delivery.groups_file import append_whole, group_line, iter_groups, repair_torn_tail
from environments.proxy.group_sink import GroupFileSink, GroupsPathError

GROUP = {"tokens": [[1, 2]], "masks": [[-100, 2]], "scores": [0.0]}


def test_a_failed_write_is_cut_back_to_the_previous_size(tmp_path, monkeypatch):
    path = tmp_path / "g.jsonl"
    path.write_bytes(group_line(GROUP))
    before = path.read_bytes()
    real_write = os.write

    def half_then_enospc(fd, data):  # what a filling disk does: part of the buffer, then ENOSPC
        real_write(fd, bytes(data)[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(groups_file.os, "write", half_then_enospc)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        with pytest.raises(OSError) as raised:
            append_whole(fd, group_line(GROUP))
    finally:
        os.close(fd)
    assert raised.value.errno == errno.ENOSPC
    assert path.read_bytes() == before


def test_a_short_write_is_cut_back_and_raised_as_enospc(tmp_path, monkeypatch):
    path = tmp_path / "g.jsonl"
    real_write = os.write
    monkeypatch.setattr(groups_file.os, "write", lambda fd, data: real_write(fd, bytes(data)[:7]))
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        with pytest.raises(OSError) as raised:
            append_whole(fd, group_line(GROUP))
    finally:
        os.close(fd)
    assert raised.value.errno == errno.ENOSPC and path.read_bytes() == b""


def test_a_torn_tail_is_cut_to_the_last_line_and_saved_aside(tmp_path):
    path = tmp_path / "g.jsonl"
    whole = group_line(GROUP) * 2
    path.write_bytes(whole + b'{"tokens":[[1,')
    torn = repair_torn_tail(path)
    assert torn is not None and torn.removed_bytes == len(b'{"tokens":[[1,')
    assert path.read_bytes() == whole
    assert torn.saved_to is not None and torn.saved_to.read_bytes() == b'{"tokens":[[1,'
    assert [error for _, _, error in iter_groups(path)] == [None, None]
    assert repair_torn_tail(path) is None  # whole lines: nothing to do


def test_a_file_of_one_torn_line_is_emptied(tmp_path):
    path = tmp_path / "g.jsonl"
    path.write_bytes(b'{"tok')
    assert repair_torn_tail(path).removed_bytes == 5 and path.read_bytes() == b""


def test_the_sink_repairs_a_torn_tail_before_its_first_line(tmp_path):
    path = tmp_path / "g.jsonl"
    path.write_bytes(group_line(GROUP) + b'{"half')
    sink = GroupFileSink(path)
    asyncio.run(sink.write(dict(GROUP)))
    assert path.read_bytes() == group_line(GROUP, allow_nan=True) * 2


@pytest.mark.parametrize("kind", ["directory", "parent is a file", "no permission"])
def test_a_groups_path_that_cannot_be_written_is_refused_at_start_up(tmp_path, kind):
    if kind == "directory":
        path = tmp_path
    elif kind == "parent is a file":
        (tmp_path / "f").write_text("x")
        path = tmp_path / "f" / "groups.jsonl"
    else:
        if os.geteuid() == 0:
            pytest.skip("root writes anywhere")
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        path = locked / "groups.jsonl"
    with pytest.raises(GroupsPathError) as raised:
        GroupFileSink(path)
    assert "\n" not in str(raised.value) and str(path) in str(raised.value)
