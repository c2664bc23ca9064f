"""The simulated user of `hermes-opd bench live`: what it says after an assistant's attempt.

Pure logic. A person asked for one of the convention tasks' functions (environments/tasks/
conventions.py) and looks at what the assistant did: which files it wrote and whether the function
works (the env's verifier ran it). The reply is one of five outcomes:

- `accept`: the function works where the team wants it, under the team's name;
- `no_file`: no file was written;
- `wrong_module`: the file is not the team's module (`helpers.py`);
- `wrong_name`: the function is not named the team's way (`compute_<noun>`);
- `wrong_value`: the right file and name, but the function returns something else.

A correction names the team's convention in plain words. The wording is drawn per reply, by a
seeded RNG, from `Phrasings`: the defaults below, or a JSON file (`--phrasings`) with the same keys,
so that a check can rerun the bench with other phrasings. Templates may use `{function}`,
`{module}` (file name with `.py`), `{verb}` (the team's name prefix), `{noun}`, `{expression}` and
`{written}` (the files the assistant wrote, or `nothing`).
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path

from environments.tasks.conventions import PREFERRED_VERB, ConventionTask
from hermes_opd.contract.errors import ConfigError

OUTCOMES = ("accept", "no_file", "wrong_module", "wrong_name", "wrong_value")


@dataclass(frozen=True)
class Phrasings:
    """Reply templates per outcome (each a non-empty list; one is drawn per reply)."""

    accept: tuple[str, ...] = (
        "Thanks, that works.",
        "Perfect, that's what I wanted.",
        "Looks good, thank you.",
    )
    no_file: tuple[str, ...] = (
        "I don't see any file. Please use the write_file tool to write the function to {module}.",
        "Nothing was written. Please write the function to a file with the write_file tool.",
    )
    wrong_module: tuple[str, ...] = (
        "That's the wrong file. Our team keeps all code in {module}, so it goes there.",
        "No, we put every function in {module} here, not in {written}.",
        "Wrong file: the team's convention is {module} for all code.",
    )
    wrong_name: tuple[str, ...] = (
        "That's the wrong name. In this team every function name starts with {verb}_, so this one is {function}.",
        "No, we name functions {verb}_<noun> here. Please rename it to {function}.",
        "Wrong name: our convention is the {verb}_ prefix, so call it {function}.",
    )
    wrong_value: tuple[str, ...] = (
        "It doesn't work: {function}(x) should return {expression}.",
        "The result is wrong. {function}(x) must return {expression}.",
    )

    @classmethod
    def from_mapping(cls, data: Mapping[str, object], source: str = "phrasings") -> Phrasings:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"{source}: unknown outcomes {unknown}; known: {', '.join(OUTCOMES)}")
        values: dict[str, tuple[str, ...]] = {}
        for key, value in data.items():
            if isinstance(value, str):
                value = [value]
            if (
                not isinstance(value, list)
                or not value
                or not all(isinstance(v, str) and v.strip() for v in value)
            ):
                raise ConfigError(f"{source}: {key!r} must be a non-empty list of non-empty strings")
            for template in value:
                try:
                    template.format(**_EXAMPLE_FIELDS)
                except (KeyError, IndexError, ValueError) as exc:
                    raise ConfigError(
                        f"{source}: {key!r} template {template!r} uses an unknown field {exc}; "
                        f"known: {', '.join(_EXAMPLE_FIELDS)}"
                    ) from exc
            values[key] = tuple(value)
        return cls(**values)

    @classmethod
    def load(cls, path: str | Path) -> Phrasings:
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ConfigError(f"{path}: cannot read the phrasings: {exc}") from exc
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: the phrasings must be a JSON object of outcome -> list of templates")
        return cls.from_mapping(data, str(path))


_EXAMPLE_FIELDS = {
    "function": "compute_total",
    "module": "helpers.py",
    "verb": PREFERRED_VERB,
    "noun": "total",
    "expression": "x + 2",
    "written": "utils.py",
}


def defines(content: str, name: str) -> bool:
    return re.search(rf"^\s*def\s+{re.escape(name)}\s*\(", content, re.MULTILINE) is not None


def outcome_of(task: ConventionTask, written: Mapping[str, str], passed: bool) -> str:
    """The outcome a person reads off the attempt: `written` maps each file the assistant wrote
    (its path as given) to its content; `passed` is the verifier's verdict."""
    if passed:
        return "accept"
    if not written:
        return "no_file"
    module_file = f"{task.module}.py"
    if not any(Path(path).name == module_file for path in written):
        return "wrong_module"
    if not any(defines(content, task.function) for content in written.values()):
        return "wrong_name"
    return "wrong_value"


def user_reply(
    task: ConventionTask, outcome: str, written: Mapping[str, str], phrasings: Phrasings, rng: random.Random
) -> str:
    """The user's words for `outcome`, one template drawn with `rng`."""
    template = rng.choice(getattr(phrasings, outcome))
    return template.format(
        function=task.function,
        module=f"{task.module}.py",
        verb=task.function.split("_", 1)[0],
        noun=task.noun,
        expression=task.expression,
        written=", ".join(sorted(written)) or "nothing",
    )
