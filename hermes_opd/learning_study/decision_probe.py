"""Can the hinted teacher transmit a convention it is told? The teacher's and the student's
preference at the decision positions of the held-out convention tasks (issue #43's diagnosis).

OPD can only move the student toward what the hinted teacher prefers. If, at the token where an
attempt writes the file name (module tasks) or the function's verb (name tasks), the teacher WITH a
hint saying `utils.py` (or `fetch_<noun>`) does not put more probability on that value than the
student does without the hint, no amount of OPD moves the student to it.

For every held-out convention task:
1. the student's greedy first attempt, one turn of the env's agent loop without a hint
   (hermes_opd/learning_study/hint_following.py `attempt`: the env's prompt rendering, real tools,
   the verifier), recorded as the env records it (the trajectory's exact ids);
2. the decision: the first of the task's four candidates the attempt wrote (the file path, or the
   name in `def <name>(`); an attempt that wrote none is replaced by the reference attempt's text
   (counted in the table);
3. four continuations, the attempt with each candidate in that place: the attempt's own ids before
   the decision (the student writes `def`, ` `, `get`, not the canonical `def`, ` get`), then the
   candidate and the rest of the attempt encoded by the tokenizer;
4. their prompt logprobs from vLLM (`prompt_logprobs`: the logprob and the rank of each actual token,
   the request the teacher's scoring makes, cut after the decision), once for the student (the
   unhinted ids) and once per hint for the teacher: the same ids with the hint spliced after the
   task message exactly as the pipeline builds the teacher input
   (hermes_opd/record/hint_splice.py `build_canonical_teacher_input`).

The attempts are sampled with transformers (greedy), not vLLM; on a loaded 2-core machine the whole
probe takes about 8 minutes.

Per candidate: log P(candidate | prefix) (the sum over the tokens where the continuations differ),
its share among the four, and the rank of its first token at the decision position (OPD's rows are
the teacher's top-50).

The hints are the rules judge's for the next state the verifier would give when the convention is
the stated value (judge/rules_backend.py: `The checker looks for `utils.py` ...`, `The tests could
not import the name `fetch_revenue` ...`), and the simulated user's first correction for it
(hermes_opd/learning_study/live_user.py `Phrasings`), for the shipped convention (`helpers.py`,
`compute_`) and for another (`utils.py`, `fetch_` by default).

`python -m hermes_opd.learning_study.decision_probe [--model DIR] [--vllm-url URL] [--out FILE]`
prints the table (and writes the rows as JSON with `--out`); without `--vllm-url` it starts a CPU vLLM
for the model (about a minute) and stops it at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from environments.tasks.convention_choice import convention_task
from environments.tasks.conventions import MODULES, PREFERRED_MODULE, PREFERRED_VERB, VERBS, convention_splits
from hermes_opd.learning_study.hint_following import TransformersSampler, attempt, default_system_prompt
from hermes_opd.learning_study.live_user import Phrasings
from hermes_opd.learning_study.paths import shipped_student_dir
from hermes_opd.record.hint_splice import build_canonical_teacher_input
from judge.config import JudgeConfig
from judge.rules_backend import RulePatterns, rule_hint

TOP_K = 50
"""The teacher's top-k, as the pipeline asks vLLM for it: a first token ranked above it is outside
the rows OPD reads."""


def rules_hint(kind: str, value: str, noun: str, module: str = PREFERRED_MODULE) -> str:
    """The rules judge's hint for the verifier's reveal of `value` (a file such as `utils.py`, or a
    verb such as `fetch`), from the verifier's own wording of that failure."""
    if kind == "module":
        feedback = f"Missing solution file(s) (not found): {value}"
    else:
        feedback = (
            f"could not load the solution: ImportError: cannot import name '{value}_{noun}' from '{module}'"
        )
    hint = rule_hint(feedback, RulePatterns.from_config(JudgeConfig(backend="rules", m=1)))
    if hint is None:
        raise RuntimeError(f"the rules judge gave no hint for {feedback!r}")
    return hint


def user_hint(kind: str, value: str, noun: str, written: str) -> str:
    """The simulated user's first correction for `value` (live_user.py's default phrasings)."""
    phrasings = Phrasings()
    if kind == "module":
        return phrasings.wrong_module[0].format(module=value, written=written)
    return phrasings.wrong_name[0].format(verb=value, function=f"{value}_{noun}")


@dataclass
class Decision:
    """One held-out task's decision: the candidates' continuations and their logprobs per context."""

    task_id: str
    kind: str
    candidates: list[str]
    """The convention values in the table's words (`helpers.py`, ..., or the verbs `compute`, ...)."""
    greedy_choice: str | None
    """What the student's greedy attempt wrote there (None: no candidate, the reference text used)."""
    scores: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    """context name -> candidate -> {logprob, share, first_token_rank}."""


def _score(http: httpx.Client, url: str, model: str, ids: list[int], k: int) -> list[Any]:
    body = {"model": model, "prompt": ids, "max_tokens": 1, "temperature": 0.0, "prompt_logprobs": k}
    response = http.post(f"{url}/v1/completions", json=body)
    response.raise_for_status()
    return response.json()["choices"][0]["prompt_logprobs"]


def _common_prefix(seqs: list[list[int]]) -> int:
    n = 0
    while all(n < len(s) for s in seqs) and len({s[n] for s in seqs}) == 1:
        n += 1
    return n


def _common_suffix(seqs: list[list[int]], floor: int) -> int:
    n = 0
    while all(len(s) - n - 1 >= floor for s in seqs) and len({s[len(s) - n - 1] for s in seqs}) == 1:
        n += 1
    return n


def candidate_scores(
    http: httpx.Client, url: str, model: str, prompt: list[int], continuations: dict[str, list[int]]
) -> dict[str, dict[str, float]]:
    """For each candidate: the logprob of its differing tokens after `prompt`, its share among the
    candidates, and the rank of its first differing token in the top-k at the decision position."""
    names = list(continuations)
    seqs = [prompt + continuations[n] for n in names]
    start = _common_prefix(seqs)
    tail = _common_suffix(seqs, start)
    out: dict[str, dict[str, float]] = {}
    for name, seq in zip(names, seqs, strict=True):
        rows = _score(http, url, model, seq[: len(seq) - tail], 0)  # the actual token's logprob and rank
        logprob = sum(float(rows[i][str(seq[i])]["logprob"]) for i in range(start, len(seq) - tail))
        first = rows[start][str(seq[start])]
        rank = first.get("rank")
        out[name] = {"logprob": logprob, "first_token_rank": float(rank) if rank is not None else math.inf}
    top = max(v["logprob"] for v in out.values())
    total = sum(math.exp(v["logprob"] - top) for v in out.values())
    for v in out.values():
        v["share"] = math.exp(v["logprob"] - top) / total
    return out


def _decision_text(task, response: str) -> tuple[int, int, str] | None:
    """(start, end, candidate) of the first candidate written in the response text, or None."""
    found = []
    for cand in task.candidates:
        at = response.find(cand)
        if at >= 0:
            found.append((at, at + len(cand), cand))
    return min(found) if found else None


def decode_exactly(tokenizer, ids: list[int]) -> str:
    """The ids' text with special tokens and spacing as they are."""
    return tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)


def ids_before(tokenizer, ids: list[int], offset: int) -> list[int]:
    """The longest prefix of `ids` whose text ends at or before character `offset` of their text: the
    student's own tokenization up to the decision (it writes `def`, ` `, `get`, not the canonical
    `def`, ` get`), so each candidate is scored in the place the student's attempt put it."""
    k = 0
    while k < len(ids) and len(decode_exactly(tokenizer, ids[: k + 1])) <= offset:
        k += 1
    return ids[:k]


def _value(kind: str, cand: str) -> str:
    return cand if kind == "module" else cand.split("_", 1)[0]


async def probe(
    model_dir: str,
    url: str,
    model: str,
    stated: dict[str, str],
    max_tokens: int = 128,
    adapter: str | None = None,
) -> list[Decision]:
    """Every held-out convention task's decision, scored for the student and the hinted teachers
    (`stated`: kind -> the other value the hints state); with `adapter` (a LoRA loaded in vLLM under
    that name), for the student and the student with the adapter, unhinted, instead."""
    sampler = TransformersSampler(model_dir, 0.0, 0)
    tokenizer = sampler.tokenizer
    system_prompt = default_system_prompt()
    _, heldout = convention_splits()
    decisions = []
    with httpx.Client(timeout=120) as http:
        for task_record in heldout:
            task = convention_task(task_record.task_id)
            result, trajectory = await attempt(task_record, sampler, system_prompt, None, max_tokens)
            span = trajectory.turns[0]
            response = tokenizer.decode(
                trajectory.tokens[span.start : span.end],
                skip_special_tokens=False,
                clean_up_tokenization_spaces=False,
            )
            where = _decision_text(task, response)
            greedy = _value(task.kind, where[2]) if where else None
            own = list(trajectory.tokens[span.start : span.end])
            if where is None:  # the reference attempt: the path, then the function (canonical ids)
                response = (
                    '<tool_call>\n{"name": "write_file", "arguments": {"path": "'
                    + f"{task.module}.py"
                    + '", "content": "'
                    + task.reference_solution().replace("\n", "\\n")
                    + '"}}\n</tool_call>'
                )
                where = _decision_text(task, response)
                own = []
            begin, end, _ = where
            kept = ids_before(tokenizer, own, begin)  # the student's own ids before the decision
            head = len(decode_exactly(tokenizer, kept))
            prompt = trajectory.tokens[: span.start]
            continuations = {
                _value(task.kind, cand): kept
                + tokenizer.encode(response[head:begin] + cand + response[end:], add_special_tokens=False)
                for cand in task.candidates
            }
            decision = Decision(task.task_id, task.kind, list(continuations), greedy)
            decision.scores["student"] = candidate_scores(http, url, model, prompt, continuations)
            if adapter is not None:
                decision.scores["student+adapter"] = candidate_scores(
                    http, url, adapter, prompt, continuations
                )
                decisions.append(decision)
                continue
            default = f"{PREFERRED_MODULE}.py" if task.kind == "module" else PREFERRED_VERB
            for value in (default, stated[task.kind]):
                written = where[2] if task.kind == "module" else "helpers.py"
                for source, hint in (
                    ("rules", rules_hint(task.kind, value, task.noun)),
                    ("user", user_hint(task.kind, value, task.noun, written)),
                ):
                    splice = build_canonical_teacher_input(trajectory, span, hint, tokenizer)
                    teacher_prompt = splice.ids[: splice.prompt_len]
                    decision.scores[f"teacher[{source}:{value}]"] = candidate_scores(
                        http, url, model, teacher_prompt, continuations
                    )
            decisions.append(decision)
            print(f"  {task.task_id}: greedy {greedy}", file=sys.stderr, flush=True)
    return decisions


def table(decisions: list[Decision], stated: dict[str, str]) -> str:
    """Per kind and context: for the default and the stated value, the tasks (of the kind's held-out
    tasks) where it is the top candidate, its mean share, mean logprob, and median first-token rank."""
    lines = []
    for kind in ("module", "name"):
        mine = [d for d in decisions if d.kind == kind]
        if not mine:
            continue
        default = f"{PREFERRED_MODULE}.py" if kind == "module" else PREFERRED_VERB
        greedy = [str(d.greedy_choice) for d in mine]
        lines.append(
            f"{kind} tasks ({len(mine)}): the student's greedy choice "
            + ", ".join(f"{c}: {greedy.count(c)}" for c in sorted(set(greedy)))
            + " (None: no candidate written; those are scored on the reference attempt's text)"
        )
        header = f"  {'context':<28}{'value':<12}{'top':>5}{'share':>8}{'logprob':>9}{'rank1':>7}"
        lines += [header, "  " + "-" * (len(header) - 2)]
        for context in mine[0].scores:
            for value in (default, stated[kind]):
                rows = [d.scores[context][value] for d in mine]
                top = sum(
                    1
                    for d in mine
                    if max(d.scores[context], key=lambda c: d.scores[context][c]["logprob"]) == value
                )
                share = statistics.fmean(r["share"] for r in rows)
                logprob = statistics.fmean(r["logprob"] for r in rows)
                rank = statistics.median(r["first_token_rank"] for r in rows)
                lines.append(
                    f"  {context:<28}{value:<12}{top:>3}/{len(mine):<2}{share:>7.3f}{logprob:>9.2f}{rank:>7.0f}"
                )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m hermes_opd.learning_study.decision_probe", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--model", default=str(shipped_student_dir()))
    parser.add_argument(
        "--vllm-url", default=None, help="a running vLLM serving --model (else one is started)"
    )
    parser.add_argument("--served-model", default="dev-model")
    parser.add_argument("--module", default="utils.py", choices=[f"{m}.py" for m in MODULES])
    parser.add_argument("--verb", default="fetch", choices=list(VERBS))
    parser.add_argument(
        "--adapter",
        default=None,
        help="a trained LoRA directory (a run's checkpoints/step_*/model): score the unhinted "
        "student with it instead of the teachers (--vllm-url needs --enable-lora)",
    )
    parser.add_argument("--out", default=None, help="write the rows as JSON here")
    args = parser.parse_args(argv)
    stated = {"module": args.module, "name": args.verb}
    server = None
    url = args.vllm_url
    if url is None:
        from hermes_opd.devkit.dev_server import DevServer

        print(f"starting a CPU vLLM for {args.model} ...", file=sys.stderr)
        log_path = Path(args.out or "decision_probe").with_suffix(".vllm.log")
        if args.adapter:  # it must load the adapter at run time
            from hermes_opd.learning_study.loop import start_lora_vllm

            server = start_lora_vllm(args.model, 8, log_path, args.served_model)
        else:
            server = DevServer(
                args.model, served_model_name=args.served_model, log_path=str(log_path)
            ).start()
        url = server.root_url
    adapter = None
    try:
        if args.adapter:
            from trainer_adapters.weight_sync import load_lora_adapter, unload_lora_adapter

            adapter = f"decision-probe-{Path(args.adapter).resolve().parent.name}"
            with httpx.Client(timeout=120) as http:
                load_lora_adapter(http, url, adapter, Path(args.adapter).resolve())
        decisions = asyncio.run(probe(args.model, url, args.served_model, stated, adapter=adapter))
    finally:
        if adapter is not None:
            with httpx.Client(timeout=120) as http:
                unload_lora_adapter(http, url, adapter)
        if server is not None:
            server.stop()
    print(table(decisions, stated))
    if args.out:
        Path(args.out).write_text(json.dumps([vars(d) for d in decisions], indent=1, default=float) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
