"""The groups file has one module (environments/delivery/groups_file.py): its writers (`process`, the
proxy's file sink, the send spool) and its readers (`validate`, `send`, `inspect`, the replay
engine) all go through it, and no other module parses or writes its lines itself."""

from __future__ import annotations

import ast
import asyncio
import json
from pathlib import Path

from environments.delivery.groups_file import (
    GroupWriter,
    group_line,
    iter_groups,
    parse_group_line,
    scan_output,
    unwrap_group,
)
from environments.proxy.group_sink import GroupFileSink

ROOT = Path(__file__).resolve().parents[2]
GROUP = {"tokens": [[1, 2]], "masks": [[-100, 2]], "scores": [1.0]}
USERS = {
    "hermes_opd/commands/validate.py": {"iter_groups"},
    "hermes_opd/commands/send.py": {"iter_groups"},
    "hermes_opd/commands/inspect.py": {"iter_groups"},
    "hermes_opd/commands/process.py": {"GroupWriter", "scan_output"},
    "environments/delivery/group_replay.py": {"parse_group_line", "unwrap_group", "without_wrapper"},
    "environments/delivery/send_spool.py": {"group_line"},
    "environments/proxy/group_sink.py": {"append_whole", "group_line", "repair_torn_tail"},
}
"""Each reader and writer of the file, and what it takes from the one module."""
FORMAT_NAMES = {
    "unwrap_group",
    "iter_groups",
    "scan_output",
    "GroupWriter",
    "ExistingOutput",
    "WRAPPER_FIELDS",
    "HEAD_PATTERN",
    "group_line",
    "parse_group_line",
    "append_whole",
    "repair_torn_tail",
}


def _imported_from_groups_file(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == "environments.delivery.groups_file":
            names.update(alias.name for alias in node.names)
    return names


def test_every_reader_and_writer_uses_the_one_module():
    for relative, names in USERS.items():
        assert names <= _imported_from_groups_file(ROOT / relative), relative


def test_no_other_module_defines_the_format():
    home = ROOT / "environments/delivery/groups_file.py"
    for package in ("hermes_opd", "environments", "judge", "scoring", "trainer_adapters"):
        for path in (ROOT / package).rglob("*.py"):
            if path == home:
                continue
            tree = ast.parse(path.read_text())
            defined = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.ClassDef)}
            defined |= {
                t.id
                for n in ast.walk(tree)
                if isinstance(n, ast.Assign)
                for t in n.targets
                if isinstance(t, ast.Name)
            }
            assert not defined & FORMAT_NAMES, f"{path.relative_to(ROOT)} defines {defined & FORMAT_NAMES}"


def test_process_writes_and_resumes_and_every_reader_reads_it(tmp_path):
    path = tmp_path / "groups.jsonl"
    writer = GroupWriter(path)
    writer.write(0, "t0", GROUP)
    writer.write(1, "t1", GROUP)
    writer.close()
    assert path.read_bytes().startswith(b'{"group_index":0,"task_id":"t0","tokens":[[1,2]]')
    assert scan_output(path).tasks == {0: "t0", 1: "t1"}
    read = list(iter_groups(path))
    assert [(line, error) for line, _, error in read] == [(1, None), (2, None)]
    assert parse_group_line(path.read_bytes().splitlines()[0]) == (GROUP, None)


def test_the_proxy_sink_writes_the_same_lines(tmp_path):
    sink = GroupFileSink(tmp_path / "proxy.jsonl")
    asyncio.run(sink.write(dict(GROUP)))
    assert (tmp_path / "proxy.jsonl").read_bytes() == group_line(GROUP, allow_nan=True)
    assert group_line(GROUP) == (json.dumps(GROUP, separators=(",", ":")) + "\n").encode()


def test_a_wrapper_line_is_unwrapped():
    assert unwrap_group({"group": GROUP, "note": "x"}) == GROUP
    assert unwrap_group([1]) is None
