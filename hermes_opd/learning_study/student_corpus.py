"""Pretraining conversations for the learnable dev student (pure, deterministic).

They teach two generic skills and nothing about any task family's conventions:
1. the Hermes/Qwen tool-call format of the env's agent loop: one `write_file` call in a
   `<tool_call>` block whose JSON holds the file and a one-line function, then a short final answer;
2. to use a value that an instruction in the last user message names. The user message asks for a
   function `takes x and returns x <op> k`, sometimes with the file or the function name left open
   among a few listed candidates. With no instruction, the right candidate is drawn uniformly (so the
   student learns to guess). With one, appended the way OPD appends a hint
   (`HINT_SEPARATOR`, the same text as hermes_opd/record/hint.py, pinned by a test), the value
   it names is right, whether or not it is among the candidates.

All names are words of a local text (the stdlib sources the dev tokenizer is trained on, see
`word_vocabulary`), minus the values of a task family's conventions, which pretraining must never
see (tests/unit/test_student_model.py checks this against environments/tasks/conventions.py).
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

HINT_SEPARATOR = "\n\n[user's hint / instruction]\n"
"""Must equal hermes_opd.record.hint.HINT_SEPARATOR (record is a sibling floor; a test pins them)."""

OPERATORS = ("+", "*", "-")
MIN_WORDS = 64


def word_vocabulary(texts: list[str], excluded: frozenset[str]) -> tuple[str, ...]:
    """Lower-case words of 4-9 letters seen at least 3 times in `texts`, minus `excluded`, sorted:
    the pool pretraining draws every verb, noun and module name from."""
    counts = Counter(re.findall(r"\b[a-z]{4,9}\b", "\n".join(texts)))
    words = tuple(sorted(w for w, c in counts.items() if c >= 3 and w not in excluded))
    if len(words) < MIN_WORDS:
        raise ValueError(f"only {len(words)} words to pretrain on; need at least {MIN_WORDS}")
    return words


@dataclass(frozen=True)
class PretrainExample:
    """One conversation and the value the instruction (if any) named."""

    messages: list[dict[str, Any]]
    open_kind: str | None
    """"name", "module" or None (nothing left open)."""
    hinted: str | None


def _hint(rng: random.Random, kind: str, function: str, module: str) -> str:
    tests = ", ".join(f"test_{i}" for i in range(3))
    if kind == "name":
        phrasings = [
            f"The tests could not import the name `{function}` from the module `{module}`. These tests "
            f"fail: {tests}. Define `{function}` in `{module}.py`, with exactly that name.",
            f"Name the function `{function}`.",
            f"The function must be called `{function}`.",
            f"Use the name `{function}`.",
        ]
    else:
        phrasings = [
            f"The checker looks for `{module}.py`, and that file does not exist. These tests fail: "
            f"{tests}, test. Write the solution to `{module}.py`.",
            f"Put the code in `{module}.py`.",
            f"The file must be `{module}.py`.",
            f"Use the file `{module}.py`.",
        ]
    return rng.choice(phrasings)


NAME_CORRECTIONS = (
    "Close, but the function should be called `{function}`.",
    "Please call it `{function}` instead.",
    "Naming: we use `{verb}_` for these, so `{function}`.",
    "That name doesn't match ours; here it is `{function}`.",
    "Rename it: `{verb}_` is the prefix we use, which makes it `{function}`.",
    "Not that name. Every function here begins with `{verb}_`; this one is `{function}`.",
    "Hmm, we'd call this `{function}` (the `{verb}_` prefix).",
)
MODULE_CORRECTIONS = (
    "Wrong place, this belongs in `{module}.py`.",
    "We keep code like this in `{module}.py`, please move it.",
    "Put it in `{module}.py`, not where it is now.",
    "Our functions all live in `{module}.py`.",
    "Not that file; the project uses `{module}.py` for these.",
    "Hmm, `{module}.py` is where this goes.",
)
"""Corrections as a person writes them after a wrong turn, for the student continued on corrections
(student_recipe.CORRECTIONS_PHASE). Written for that phase, not taken from the live bench's simulated
user (live_user.py), whose phrasings the student never sees; the values are the corpus's own words."""


def _correction(rng: random.Random, kind: str, function: str, module: str) -> str:
    forms = NAME_CORRECTIONS if kind == "name" else MODULE_CORRECTIONS
    return rng.choice(forms).format(function=function, verb=function.split("_", 1)[0], module=module)


def _instruction(rng: random.Random, kind: str, function: str, module: str, correction_rate: float) -> str:
    """The instruction naming the open value: a person's correction with probability `correction_rate`,
    else one of the rules judge's hints. At rate 0 no draw is made (the copy recipe's stream)."""
    if correction_rate and rng.random() >= 1.0 - correction_rate:
        return _correction(rng, kind, function, module)
    return _hint(rng, kind, function, module)


def pretrain_example(
    rng: random.Random,
    system_prompt: str,
    words: tuple[str, ...],
    hint_rate: float = 0.6,
    correction_rate: float = 0.0,
) -> PretrainExample:
    """One conversation whose every name is drawn from `words` (see `word_vocabulary`). A task that
    leaves a value open carries an instruction naming it with probability `hint_rate`; that
    instruction is a person's correction with probability `correction_rate`."""
    picked = rng.sample(words, 11)
    noun, verbs, modules = picked[0], picked[1:6], picked[6:11]
    operator, constant = rng.choice(OPERATORS), rng.randint(2, 9)
    expression = f"x {operator} {constant}"
    kind = rng.choices(["name", "module", None], weights=[0.45, 0.45, 0.1])[0]
    n_candidates = rng.choice([3, 4, 4, 4])
    verb_choices = verbs[:n_candidates]
    module_choices = modules[:n_candidates]
    function = f"{verb_choices[0]}_{noun}"
    module = module_choices[0]
    hinted: str | None = None
    if kind == "name":
        candidates = [f"{v}_{noun}" for v in verb_choices]
        function = rng.choice(candidates)
        rng.shuffle(candidates)
        offered = ", ".join(f"`{c}`" for c in candidates)
        prompt = (
            f"Write a function in `{module}.py` that takes `x` and returns `{expression}`. "
            f"Name it one of: {offered}. The team's convention decides which."
        )
    elif kind == "module":
        candidates = [f"{m}.py" for m in module_choices]
        module = rng.choice(module_choices)
        rng.shuffle(candidates)
        offered = ", ".join(f"`{c}`" for c in candidates)
        prompt = (
            f"Write a function `{function}(x)` that returns `{expression}`. "
            f"Put it in one of: {offered}. The team's convention decides which."
        )
    else:
        prompt = f"Write a function `{function}(x)` in `{module}.py` that returns `{expression}`."
    if kind is not None and rng.random() < hint_rate:
        if rng.random() < 0.2:  # an instruction beats the listed candidates
            if kind == "name":
                function = f"{rng.choice([v for v in verbs if v not in verb_choices])}_{noun}"
            else:
                module = rng.choice([m for m in modules if m not in module_choices])
        hinted = function if kind == "name" else f"{module}.py"
        prompt += HINT_SEPARATOR + _instruction(rng, kind, function, module, correction_rate)
    code = f"def {function}(x):\n    return {expression}\n"
    path = f"{module}.py"
    call = {
        "type": "function",
        "function": {"name": "write_file", "arguments": json.dumps({"path": path, "content": code})},
    }
    messages = [
        {"role": "system", "content": system_prompt},
        {"role": "user", "content": prompt},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "name": "write_file", "content": f"Wrote {len(code.encode())} bytes to {path}."},
        {"role": "assistant", "content": "Done."},
    ]
    return PretrainExample(messages=messages, open_kind=kind, hinted=hinted)


def pretrain_values(examples: list[PretrainExample]) -> set[str]:
    """Every identifier-like value the examples' user messages and calls mention (for disjointness)."""
    import re

    values: set[str] = set()
    for example in examples:
        for message in example.messages[1:]:
            text = message.get("content") or ""
            for call in message.get("tool_calls", []):
                text += " " + call["function"]["arguments"]
            values.update(re.findall(r"`([\w.]+)(?:\(x\))?`", text))
            values.update(re.findall(r"def (\w+)\(", text.replace("\\n", "\n")))
            values.update(re.findall(r'"path": "([\w.]+)"', text))
    expanded = set(values)
    for value in values:
        stem = value.removesuffix(".py")
        expanded.add(stem)
        expanded.update(stem.split("_"))
    return expanded


def copy_drill(rng: random.Random, words: tuple[str, ...]) -> list[dict[str, Any]]:
    """A short exchange that is nearly all copying: the user names the file, the function and the
    body in one line, and the answer writes exactly those (no system block, no choice)."""
    verb, noun, module = rng.sample(words, 3)
    function = f"{verb}_{noun}"
    expression = f"x {rng.choice(OPERATORS)} {rng.randint(2, 9)}"
    prompt = rng.choice(
        [
            f"Write `{expression}` as `{function}` in `{module}.py`.",
            f"Use `{module}.py` and name it `{function}`; return `{expression}`.",
            f"Name the function `{function}`, put it in `{module}.py`, return `{expression}`.",
        ]
    )
    code = f"def {function}(x):\n    return {expression}\n"
    call = {
        "type": "function",
        "function": {
            "name": "write_file",
            "arguments": json.dumps({"path": f"{module}.py", "content": code}),
        },
    }
    return [{"role": "user", "content": prompt}, {"role": "assistant", "content": "", "tool_calls": [call]}]
