"""The layering rule (docs/architecture.md): imports point down the floors only, trainer_adapters/
imports nothing of the project but the contract, and no module imports itself through a circle.

A small AST walk over every module of the five project packages; every import counts, including the
ones inside functions (a lazy import is still an arrow)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("hermes_opd", "environments", "judge", "scoring", "trainer_adapters")

# Floor of each part of the project, bottom (0) to top. A module may import its own part (the same
# subpackage) and any part on a LOWER floor; nothing on its own floor in another part, nothing above.
FLOORS: dict[str, int] = {
    # hermes_opd's core: the bottom band
    "hermes_opd": 0,  # the package root: __version__ only
    "hermes_opd.contract": 0,
    "hermes_opd.record": 1,
    "hermes_opd.vllm_api": 1,
    "hermes_opd.runtime": 1,  # process runtime: exit codes, stop signals, wait notice, pids
    # judge/ and scoring/: one band
    "judge": 2,
    "scoring": 2,
    # environments/: the OPD pipeline, the tasks, the rollout, the Atropos env, the live-session proxy
    "environments": 3,  # the package root: a docstring only
    "environments.pipeline": 3,  # the OPD pipeline and the servers that play its roles
    "environments.delivery": 4,  # both producers' floor: group builder, groups file, spool, replay
    "environments.tasks": 5,
    "environments.rollout": 6,
    # the two producers, side by side on one floor: neither imports the other
    "environments.atropos": 7,  # the atroposlib env, its config, CLI and server class
    "environments.proxy": 7,  # the live-session producer: built on the recorder, parser, builder
    # hermes_opd's shell: the top band
    "hermes_opd.devkit": 8,
    "hermes_opd.learning_study": 9,  # the learning bench, its loop and the copying student
    "hermes_opd.bench": 10,  # `hermes-opd bench learning` is the learning study's bench
    "hermes_opd.commands": 11,  # above the benchmarks: `hermes-opd demo` runs the learning study's loop
}
ATROPOS_ONLY = ("atroposlib",)
"""Third-party packages that only `environments.atropos` (and the commands above it) may import."""
TRAINERS = "trainer_adapters"
TRAINER_MAY_IMPORT = ("hermes_opd.contract",)
MAY_IMPORT_TRAINERS = ("hermes_opd.commands", "hermes_opd.bench", "hermes_opd.learning_study")


def part_of(module: str) -> str:
    """The longest FLOORS (or trainer) prefix of a dotted module name."""
    if module == TRAINERS or module.startswith(TRAINERS + "."):
        return TRAINERS
    best = ""
    for part in FLOORS:
        if (module == part or module.startswith(part + ".")) and len(part) > len(best):
            best = part
    if not best:
        raise KeyError(f"{module} belongs to no floor; add its part to FLOORS")
    return best


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_imports(source: str, module: str, is_package: bool) -> list[tuple[int, str]]:
    """(line, imported module) for every import of a project module in `source`."""
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base if is_package else base[:-1]
                base = base[: len(base) - node.level + 1]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            names = [stem]
            # `from pkg import submodule` imports the submodule too
            names += [f"{stem}.{a.name}" for a in node.names]
        for name in names:
            if name.split(".")[0] in PACKAGES:
                out.append((node.lineno, name))
    return out


def import_graph(root: Path) -> dict[str, list[tuple[int, str]]]:
    modules = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            modules[module_name(path, root)] = path
    graph: dict[str, list[tuple[int, str]]] = {}
    for name, path in modules.items():
        edges = []
        for line, target in project_imports(path.read_text(), name, path.name == "__init__.py"):
            # resolve `pkg.attr` to the longest prefix that is a module
            while target not in modules and "." in target:
                target = target.rsplit(".", 1)[0]
            if target in modules and target != name and (line, target) not in edges:
                edges.append((line, target))
        graph[name] = edges
    return graph


def upward_imports(graph: dict[str, list[tuple[int, str]]]) -> list[str]:
    bad = []
    for source, edges in graph.items():
        src = part_of(source)
        for line, target in edges:
            dst = part_of(target)
            if dst == src:
                continue
            if src == TRAINERS:
                ok = dst in TRAINER_MAY_IMPORT
            elif dst == TRAINERS:
                ok = src in MAY_IMPORT_TRAINERS
            else:
                ok = FLOORS[dst] < FLOORS[src] or (dst == "hermes_opd" and src.startswith("hermes_opd"))
            if not ok:
                bad.append(f"{source}:{line} imports {target} ({src} -> {dst})")
    return bad


def circles(graph: dict[str, list[tuple[int, str]]]) -> list[list[str]]:
    """Every strongly connected component with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for _, w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


@pytest.fixture(scope="module")
def graph():
    return import_graph(ROOT)


def bands(floors: dict[str, int]) -> dict[str, int]:
    """How many unbroken runs of floors each top-level package holds, reading the floors bottom up
    (parts that share a floor read as one step)."""
    runs: dict[str, int] = {}
    previous: set[str] = set()
    for floor in sorted(set(floors.values())):
        here = {part.split(".")[0] for part, f in floors.items() if f == floor}
        for package in here - previous:
            runs[package] = runs.get(package, 0) + 1
        previous = here
    return runs


def test_each_top_level_package_reads_as_one_band_or_two():
    """`ls` shows the floors: hermes_opd's core below judge/ and scoring/, its shell above
    environments/, nothing of it in between; every other package one band."""
    assert bands(FLOORS) == {"hermes_opd": 2, "judge": 1, "scoring": 1, "environments": 1}
    core = max(FLOORS[p] for p in ("hermes_opd.contract", "hermes_opd.record", "hermes_opd.vllm_api"))
    shell = min(FLOORS[p] for p in ("hermes_opd.devkit", "hermes_opd.bench", "hermes_opd.commands"))
    assert (
        core
        < FLOORS["judge"]
        == FLOORS["scoring"]
        < min(f for p, f in FLOORS.items() if p.startswith("environments"))
    )
    assert max(f for p, f in FLOORS.items() if p.startswith("environments")) < shell


def test_a_part_between_the_bands_is_caught():
    planted = dict(FLOORS, **{"hermes_opd.pipeline": 3})
    assert bands(planted)["hermes_opd"] == 3


def test_every_module_belongs_to_a_floor(graph):
    for module in graph:
        part_of(module)


def test_no_upward_import(graph):
    assert upward_imports(graph) == []


def test_no_circle(graph):
    assert circles(graph) == []


def test_contract_imports_nothing_of_the_project(graph):
    for module, edges in graph.items():
        if part_of(module) == "hermes_opd.contract":
            assert [t for _, t in edges if part_of(t) != "hermes_opd.contract"] == [], module


def third_party_imports(source: str) -> set[str]:
    """Top-level names of every package `source` imports (lazy imports included)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_only_the_atropos_adapter_imports_atroposlib():
    """`environments.atropos` is the one part that knows Atropos: the floors below it and the proxy
    beside it do not."""
    offenders = []
    for package in ("hermes_opd", "environments", "judge", "scoring"):
        for path in sorted((ROOT / package).rglob("*.py")):
            module = module_name(path, ROOT)
            part = part_of(module)
            if part == "environments.atropos" or FLOORS[part] > FLOORS["environments.atropos"]:
                continue
            if third_party_imports(path.read_text()) & set(ATROPOS_ONLY):
                offenders.append(module)
    assert offenders == []


def test_no_file_in_environments_over_600_lines():
    sizes = {p: len(p.read_text().splitlines()) for p in (ROOT / "environments").rglob("*.py")}
    assert {str(p.relative_to(ROOT)): n for p, n in sizes.items() if n > 600} == {}


def test_planted_upward_import_is_caught(tmp_path):
    """The walk itself can fail: a copy of two modules with an upward arrow planted is reported."""
    for package in ("hermes_opd/contract", "environments/pipeline"):
        (tmp_path / package).mkdir(parents=True)
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "hermes_opd" / "__init__.py").write_text("")
    for package in ("environments", "judge", "scoring", "trainer_adapters"):
        (tmp_path / package).mkdir(exist_ok=True)
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "environments/pipeline/opd_pipeline.py").write_text("X = 1\n")
    (tmp_path / "hermes_opd/contract/rows.py").write_text(
        "def f():\n    from environments.pipeline.opd_pipeline import X\n    return X\n"
    )
    (tmp_path / "trainer_adapters/losses.py").write_text("import environments\n")
    (tmp_path / "judge/a.py").write_text("from judge import b\n")
    (tmp_path / "judge/b.py").write_text("from judge.a import *\n")
    planted = import_graph(tmp_path)
    assert upward_imports(planted) == [
        "hermes_opd.contract.rows:2 imports environments.pipeline.opd_pipeline "
        "(hermes_opd.contract -> environments.pipeline)",
        "trainer_adapters.losses:1 imports environments (trainer_adapters -> environments)",
    ]
    assert circles(planted) == [["judge.a", "judge.b"]]
