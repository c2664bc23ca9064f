"""The convention task family: a miniature of a personalization setting, for the learning benchmark.

Every task asks for one small function (`takes x and returns <expr>`) and leaves ONE convention open
that the prompt does not settle: either the function's name (one of four verb prefixes in front of
the task's noun) or the module it goes in (one of four file names). The prompt lists the four
candidates; the user's convention picks one, the same way in every task:

- functions are named `compute_<noun>` (`PREFERRED_VERB`);
- code goes in `helpers.py` (`PREFERRED_MODULE`).

Nothing in a prompt says which candidate is right. The next state reveals it: the verifier's
feedback after a wrong attempt says `ImportError: cannot import name 'compute_total' from 'helpers'`
(a wrong name) or `Missing solution file(s) ...: helpers.py` (a wrong file), and the rules judge
turns exactly that text into a hint (judge/rules_backend.py). An agent that guesses uniformly passes
about a quarter of first attempts; one that learned the convention from revealed hints passes all.

The team's convention can be set to other candidates (`Convention`; `HERMES_OPD_CONVENTION=verb,module`
in the environment of every process of a run, e.g. `get,utils`): the same tasks, prompts and
candidates, only the checker's name and file differ, and the task ids carry the convention
(`convention-heldout-module-revenue-get-utils`) so that `convention_choice.py` classifies by it. That
is how the learning study asks whether the hints' content reaches the student: a value the student
does not choose before training can only be learned from what the hints or the user's words say.

Train and held-out tasks use disjoint nouns (a held-out task's function is never seen in training)
and the same convention, so what is learned on train tasks is measured on held-out ones. The tasks
are generated deterministically from a seed and shipped as package data (`conventions/*.jsonl`, in
the JSONL task format of environments/tasks/loaders.py); `regenerate` rewrites them and a test checks
the shipped files are what the generator produces.
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from environments.tasks.loaders import load_jsonl_tasks
from environments.tasks.task import Task

DATA_DIR = Path(__file__).resolve().parent / "conventions"
SPLITS = ("train", "heldout")
DEFAULT_SEED = 0

VERBS = ("compute", "get", "find", "fetch")
"""Candidate function-name prefixes; the convention is `PREFERRED_VERB`."""
PREFERRED_VERB = "compute"
MODULES = ("helpers", "utils", "tools", "common")
"""Candidate module names (without `.py`); the convention is `PREFERRED_MODULE`."""
PREFERRED_MODULE = "helpers"

TRAIN_NOUNS = (
    "total",
    "score",
    "price",
    "weight",
    "margin",
    "budget",
    "height",
    "volume",
    "distance",
    "balance",
    "salary",
    "rating",
    "speed",
    "energy",
    "profit",
    "amount",
    "length",
    "width",
    "depth",
    "area",
    "power",
    "charge",
    "offset",
    "signal",
    "reward",
    "penalty",
    "ratio",
    "limit",
)
HELDOUT_NOUNS = (
    "revenue",
    "quota",
    "bonus",
    "deposit",
    "mileage",
    "pressure",
    "voltage",
    "capacity",
    "tariff",
    "interest",
    "ranking",
    "density",
)
"""Nouns of held-out tasks: never in a training task, never in the student's pretraining data."""

OPERATIONS = {"+": lambda x, k: x + k, "*": lambda x, k: x * k, "-": lambda x, k: x - k}
"""The function body is `x <op> k`, k in 2..9."""
CHECK_INPUTS = (0, 3, 10)
KINDS = ("name", "module")
"""Which convention a task leaves open: the function name, or the module it goes in."""


CONVENTION_ENV = "HERMES_OPD_CONVENTION"
"""`verb,module` (e.g. `get,utils`): the team's convention for every process that reads the env."""


@dataclass(frozen=True)
class Convention:
    """The team's convention: the function names' verb and the module's stem."""

    verb: str = PREFERRED_VERB
    module: str = PREFERRED_MODULE

    def __post_init__(self) -> None:
        if self.verb not in VERBS or self.module not in MODULES:
            raise ValueError(
                f"a convention is one of {VERBS} and one of {MODULES}, got {self.verb!r}, {self.module!r}"
            )

    @property
    def default(self) -> bool:
        return (self.verb, self.module) == (PREFERRED_VERB, PREFERRED_MODULE)

    @property
    def id_suffix(self) -> str:
        """What the task ids end with: nothing for the shipped convention, else `-<verb>-<module>`."""
        return "" if self.default else f"-{self.verb}-{self.module}"

    @classmethod
    def parse(cls, text: str) -> Convention:
        """`verb,module` (`get,utils`; `utils.py` is accepted for the module)."""
        parts = [p.strip() for p in text.split(",")]
        if len(parts) != 2:
            raise ValueError(f"a convention is `verb,module` (e.g. `get,utils`), got {text!r}")
        return cls(parts[0].rstrip("_"), parts[1].removesuffix(".py"))


def team_convention() -> Convention:
    """The convention of `HERMES_OPD_CONVENTION`, the shipped one when it is unset or empty."""
    text = os.environ.get(CONVENTION_ENV, "").strip()
    return Convention.parse(text) if text else Convention()


@dataclass(frozen=True)
class ConventionTask:
    """One generated task, before it becomes a `Task` record."""

    task_id: str
    kind: str
    noun: str
    operator: str
    constant: int
    candidates: tuple[str, ...]
    """What the prompt offers for the open convention, in the prompt's order."""
    function: str
    """The name the checker imports."""
    module: str
    """The module (file stem) the checker imports from."""

    @property
    def expression(self) -> str:
        return f"x {self.operator} {self.constant}"

    @property
    def expected_value(self) -> str:
        """The value of the open convention the checker wants."""
        return self.function if self.kind == "name" else f"{self.module}.py"

    def prompt(self) -> str:
        offered = ", ".join(f"`{c}`" for c in self.candidates)
        if self.kind == "name":
            return (
                f"Write a function in `{self.module}.py` that takes `x` and returns `{self.expression}`. "
                f"Name it one of: {offered}. The team's convention decides which."
            )
        return (
            f"Write a function `{self.function}(x)` that returns `{self.expression}`. "
            f"Put it in one of: {offered}. The team's convention decides which."
        )

    def hidden_tests(self) -> dict[str, Any]:
        checks = [
            {"expr": f"{self.function}({value})", "returns": OPERATIONS[self.operator](value, self.constant)}
            for value in CHECK_INPUTS
        ]
        return {
            "module": self.module,
            "imports": [self.function],
            # The first test is public: its failure (the import of the expected name, or the missing
            # file) is the reveal the agent reads; the others stay hidden (docs/tasks.md).
            "tests": [
                {"name": f"test_{i}", "checks": [check], **({"public": True} if i == 0 else {})}
                for i, check in enumerate(checks)
            ],
        }

    def reference_solution(self) -> str:
        return f"def {self.function}(x):\n    return {self.expression}\n"

    def record(self) -> dict[str, Any]:
        """The task in the JSONL task format (environments/tasks/loaders.py)."""
        return {
            "task_id": self.task_id,
            "prompt": self.prompt(),
            "hidden_tests": self.hidden_tests(),
            "difficulty": f"convention-{self.kind}",
            "solution_files": [f"{self.module}.py"],
            "reference_solution": self.reference_solution(),
        }


def _task(rng: random.Random, split: str, noun: str, kind: str, convention: Convention) -> ConventionTask:
    operator = rng.choice(sorted(OPERATIONS))
    constant = rng.randint(2, 9)
    function = f"{convention.verb}_{noun}"
    if kind == "name":
        candidates = [f"{verb}_{noun}" for verb in VERBS]
    else:
        candidates = [f"{module}.py" for module in MODULES]
    rng.shuffle(candidates)
    return ConventionTask(
        task_id=f"convention-{split}-{kind}-{noun}{convention.id_suffix}",
        kind=kind,
        noun=noun,
        operator=operator,
        constant=constant,
        candidates=tuple(candidates),
        function=function,
        module=convention.module,
    )


def generate(
    seed: int = DEFAULT_SEED, convention: Convention | None = None
) -> dict[str, list[ConventionTask]]:
    """{split: tasks}: one task per (noun, kind), in a seeded order; pure and deterministic. The
    convention changes only each task's name, file and id (the random draws are the same)."""
    convention = convention or Convention()
    rng = random.Random(f"convention-tasks-{seed}")
    out: dict[str, list[ConventionTask]] = {}
    for split, nouns in (("train", TRAIN_NOUNS), ("heldout", HELDOUT_NOUNS)):
        tasks = [_task(rng, split, noun, kind, convention) for noun in nouns for kind in KINDS]
        rng.shuffle(tasks)
        out[split] = tasks
    return out


def convention_values() -> set[str]:
    """Every value a task's open convention can take or offer (names, modules, file names, nouns)."""
    nouns = TRAIN_NOUNS + HELDOUT_NOUNS
    names = {f"{verb}_{noun}" for verb in VERBS for noun in nouns}
    return names | set(VERBS) | set(MODULES) | {f"{m}.py" for m in MODULES} | set(nouns)


def _jsonl(tasks: list[ConventionTask]) -> str:
    return "".join(json.dumps(t.record(), sort_keys=True) + "\n" for t in tasks)


def regenerate(data_dir: Path = DATA_DIR, seed: int = DEFAULT_SEED) -> list[Path]:
    """Write `<split>.jsonl` for every split; returns the paths."""
    data_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for split, tasks in generate(seed).items():
        path = data_dir / f"{split}.jsonl"
        path.write_text(_jsonl(tasks), encoding="utf-8")
        paths.append(path)
    return paths


def shipped_text(split: str) -> str:
    return (DATA_DIR / f"{split}.jsonl").read_text(encoding="utf-8")


def generated_text(split: str, seed: int = DEFAULT_SEED) -> str:
    return _jsonl(generate(seed)[split])


def convention_splits(convention: Convention | None = None) -> tuple[list[Task], list[Task]]:
    """(train, held-out) tasks, through the JSONL loader every user dataset goes through: as shipped
    for the shipped convention, else generated for `convention` (default: `team_convention()`)."""
    convention = convention or team_convention()
    if convention.default:
        return load_jsonl_tasks(DATA_DIR / "train.jsonl"), load_jsonl_tasks(DATA_DIR / "heldout.jsonl")
    import tempfile

    splits = generate(DEFAULT_SEED, convention)
    with tempfile.TemporaryDirectory(prefix="hermes-opd-conventions-") as tmp:
        out = []
        for split in SPLITS:
            path = Path(tmp) / f"{split}.jsonl"
            path.write_text(_jsonl(splits[split]), encoding="utf-8")
            out.append(load_jsonl_tasks(path))
    return out[0], out[1]


if __name__ == "__main__":
    for written in regenerate():
        print(f"wrote {written}")
