"""Every repository path that the code, the configs or the docs cite exists.

A cited path is a token such as `environments/rollout/verifier_rpc.py` or `docs/recipes/demo.md`:
it starts with one of the project's top-level folders and ends in a file extension. Moving or
renaming a file without updating what cites it fails here, with the citing file and line.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TOP_LEVEL = (
    "hermes_opd",
    "environments",
    "judge",
    "scoring",
    "trainer_adapters",
    "configs",
    "tests",
    "scripts",
    "docs",
    ".ci",
)
EXTENSIONS = ("py", "md", "yaml", "yml", "jsonl", "json", "sh", "png", "html", "jinja", "toml", "txt")
_ROOTS = "|".join(re.escape(t) for t in TOP_LEVEL)
_EXTENSIONS = "|".join(EXTENSIONS)
CITED_PATH = re.compile(rf"(?<![\w./-])((?:{_ROOTS})/[\w./-]*?\w\.(?:{_EXTENSIONS}))(?![\w-])")
CITING_FILES = re.compile(r"\.(py|md|yaml|yml|sh|toml|txt|html|jinja)$|^\.ci/run$")
SELF = "tests/unit/test_cited_paths.py"
"""This file: its examples are not citations."""
NOT_CITATIONS = {
    "configs/x.yaml": "a placeholder for the user's own config in docs",
    "judge/a.py": "an import-walk fixture of tests/unit/test_import_layers.py",
    "judge/b.py": "an import-walk fixture of tests/unit/test_import_layers.py",
    "tests/test_calc.py": "a file name inside a judged tool transcript",
    "tests/test_parser.py": "a file name inside a judged tool transcript",
}


def cited_paths(text: str) -> list[tuple[int, str]]:
    """(line number, path) for each cited repository path in text."""
    return [(n, m.group(1)) for n, line in enumerate(text.splitlines(), 1) for m in CITED_PATH.finditer(line)]


def missing_citations(repo: Path) -> list[str]:
    tracked = subprocess.run(["git", "ls-files"], cwd=repo, capture_output=True, text=True, check=True).stdout
    missing = []
    for name in tracked.split():
        if not CITING_FILES.search(name) or name == SELF or not (repo / name).is_file():
            continue
        for line, path in cited_paths((repo / name).read_text(errors="replace")):
            if path not in NOT_CITATIONS and not (repo / path).exists():
                missing.append(f"{name}:{line}: {path}")
    return missing


def test_every_cited_path_exists():
    assert missing_citations(REPO) == []


def test_the_check_finds_a_planted_stale_path(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "real.md").write_text("see docs/real.md and `environments/rollout/gone.py`.\n")
    subprocess.run(["git", "add", "-A"], cwd=tmp_path, check=True)
    assert missing_citations(tmp_path) == ["docs/real.md:1: environments/rollout/gone.py"]


def test_a_citation_is_a_whole_rooted_path():
    text = "a train.jsonl in environments/tasks/conventions/train.jsonl; not xdocs/a.md; tests/, docs/b.md."
    assert cited_paths(text) == [(1, "environments/tasks/conventions/train.jsonl"), (1, "docs/b.md")]
