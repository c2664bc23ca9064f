"""Where does the hinted teacher pull the student's own attempt? Per position, the forward KL from
the teacher (the student's context plus a hint) to the unhinted student, on attempts the student
sampled, for the env's hints and for the live user's words (issue #43's diagnosis of the proxy half).

OPD with the forward KL (`loss.kl_direction: forward`) moves the student, at every position of the
turn, toward the teacher's distribution there. A hint that teaches a value moves the few positions
where that value is written; a hint that also changes how the teacher starts the turn or fills
another slot moves those too, and the student learns that as well. This probe shows which.

For the first `--tasks` train tasks of each kind (module: the file is the convention; name: the
prompt names the file and the name is the convention), under the run's convention:
1. the student's attempt at `--temperature` (the live bench samples at 1.0), one turn of the env's
   agent loop (hermes_opd/learning_study/hint_following.py `attempt`), recorded as the env records it;
2. per hint source, the teacher input exactly as the pipeline builds it
   (hermes_opd/record/hint_splice.py `build_canonical_teacher_input`):
   - `rules`: the rules judge's hint for the verifier's failure with this convention (what the env's
     transmission test trains on; decision_probe.rules_hint);
   - `user`: the rules judge's hint (`rules_quote_user_feedback`, judge/rules_backend.py) for the live
     user's reply to the attempt (hermes_opd/learning_study/live_user.py: its outcome, the default
     phrasings, drawn with a seeded RNG), as the proxy builds it from a live session;
3. one float32 transformers forward each, and per position KL(teacher || student) over the whole
   vocabulary.

Per kind and source: the attempts hinted, the mean summed KL over the turn, the KL at the first token
(where the turn chooses a tool call or text), and at the two slots: the path's first token and the
function name's first token (after `def `): the KL there and how many attempts the teacher's top token
there starts the convention's file or verb.

`HERMES_OPD_CONVENTION=compute,utils python -m hermes_opd.learning_study.divergence_probe [--model DIR]
[--tasks 8] [--seed 0] [--out FILE]`: about two minutes on one core.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from environments.tasks.convention_choice import convention_task
from environments.tasks.conventions import convention_splits, team_convention
from hermes_opd.learning_study.decision_probe import decode_exactly, ids_before, rules_hint
from hermes_opd.learning_study.hint_following import TransformersSampler, attempt, default_system_prompt
from hermes_opd.learning_study.live_user import Phrasings, outcome_of, user_reply
from hermes_opd.learning_study.paths import shipped_student_dir
from hermes_opd.record.hint_splice import build_canonical_teacher_input
from hermes_opd.record.trajectory import TurnSpan
from hermes_opd.record.turn_pairs import TurnPair
from judge.config import JudgeConfig
from judge.rules_backend import RulePatterns, pair_hint

SOURCES = ("rules", "user")
SLOTS = {"path": '"path": "', "name": "def "}
"""Where each slot starts in an attempt's text: the token after the marker."""


@dataclass
class Divergence:
    """One attempt under one hint source."""

    task_id: str
    kind: str
    source: str
    hint: str
    attempt: str
    sum_kl: float
    first_kl: float
    slots: dict[str, dict[str, float | bool]] = field(default_factory=dict)
    """slot -> {kl, teacher_top_is_convention, teacher_top}."""
    top_positions: list[tuple[str, str, float]] = field(default_factory=list)
    """The 3 positions of largest KL: (the attempt's token, the teacher's top token, KL)."""


def user_hint_for(task_prompt: str, reply: str) -> str | None:
    """The rules judge's hint for a live session whose next state is the tool result and `reply`."""
    pair = TurnPair(
        turn_index=0,
        span=TurnSpan(start=0, end=1, message_index=2),
        assistant_message={"role": "assistant", "content": ""},
        context_messages=[{"role": "user", "content": task_prompt}],
        next_state_role="tool",
        next_state_text=f"(the tool result)\n\n{reply}",
        next_state_messages=(
            {"role": "tool", "content": "(the tool result)"},
            {"role": "user", "content": reply},
        ),
    )
    patterns = RulePatterns.from_config(JudgeConfig(backend="rules", rules_quote_user_feedback=True))
    return pair_hint(pair, patterns)


def slot_index(tokenizer, turn: list[int], marker: str) -> int | None:
    """The index in `turn` of the token where the text after `marker`'s first occurrence begins (the
    token holding that character), or None when the attempt does not write `marker`."""
    at = decode_exactly(tokenizer, turn).find(marker)
    return None if at < 0 else len(ids_before(tokenizer, turn, at + len(marker)))


async def probe(model_dir: str, tasks_per_kind: int, seed: int, temperature: float) -> list[Divergence]:
    import torch

    sampler = TransformersSampler(model_dir, temperature, seed)
    tokenizer, model = sampler.tokenizer, sampler.model
    convention = team_convention()
    wants = {
        "path": tokenizer.decode(tokenizer.encode(f"{convention.module}.py")[:1]),
        "name": tokenizer.decode(tokenizer.encode(convention.verb)[:1]),
    }
    phrasings, rng = Phrasings(), random.Random(seed)
    train, _ = convention_splits()
    out: list[Divergence] = []
    for kind in ("module", "name"):
        for record in [t for t in train if f"-{kind}-" in t.task_id][:tasks_per_kind]:
            task = convention_task(record.task_id)
            result, trajectory = await attempt(record, sampler, default_system_prompt(), None, 96)
            span = trajectory.turns[0]
            turn = list(trajectory.tokens[span.start : span.end])
            text = decode_exactly(tokenizer, turn)
            slots = {slot: slot_index(tokenizer, turn, marker) for slot, marker in SLOTS.items()}
            written = (
                {result.written: f"def {result.defined}(x):\n" if result.defined else ""}
                if result.written
                else {}
            )
            outcome = outcome_of(task, written, result.passed)
            value = f"{convention.module}.py" if kind == "module" else convention.verb
            hints = {
                "rules": rules_hint(kind, value, task.noun, convention.module),
                "user": None
                if outcome == "accept"
                else user_hint_for(record.prompt, user_reply(task, outcome, written, phrasings, rng)),
            }
            with torch.no_grad():
                student = torch.log_softmax(
                    model(input_ids=torch.tensor([trajectory.tokens[: span.end]])).logits[0], -1
                )
                student = student[span.start - 1 : span.end - 1]
                for source, hint in hints.items():
                    if hint is None:
                        continue
                    splice = build_canonical_teacher_input(trajectory, span, hint, tokenizer)
                    teacher = torch.log_softmax(model(input_ids=torch.tensor([splice.ids])).logits[0], -1)
                    teacher = teacher[splice.prompt_len - 1 : splice.prompt_len - 1 + len(turn)]
                    kl = (teacher.exp() * (teacher - student)).sum(-1)
                    row = Divergence(record.task_id, kind, source, hint, text, float(kl.sum()), float(kl[0]))
                    for slot, i in slots.items():
                        if i is not None:
                            top = tokenizer.decode([int(teacher[i].argmax())])
                            row.slots[slot] = {
                                "kl": float(kl[i]),
                                "teacher_top": top,
                                "teacher_top_is_convention": top.strip().startswith(wants[slot]),
                            }
                    for i in torch.topk(kl, min(3, len(turn))).indices.tolist():
                        row.top_positions.append(
                            (
                                tokenizer.decode([turn[i]]),
                                tokenizer.decode([int(teacher[i].argmax())]),
                                float(kl[i]),
                            )
                        )
                    out.append(row)
            print(f"  {record.task_id}: {outcome}", file=sys.stderr, flush=True)
    return out


def table(rows: list[Divergence]) -> str:
    convention = team_convention()
    lines = [f"convention {convention.verb}_<noun> in {convention.module}.py; KL(teacher || student) in nats"]
    header = f"  {'kind':<8}{'hint':<7}{'n':>3}{'sum KL':>8}{'KL@1st':>8}{'1st>5':>6}" + "".join(
        f"{'KL@' + s:>9}{s + ' top=conv':>15}" for s in SLOTS
    )
    lines += [header, "  " + "-" * (len(header) - 2)]
    for kind in ("module", "name"):
        for source in SOURCES:
            mine = [r for r in rows if r.kind == kind and r.source == source]
            if not mine:
                continue
            cells = f"  {kind:<8}{source:<7}{len(mine):>3}{statistics.fmean(r.sum_kl for r in mine):>8.2f}"
            cells += (
                f"{statistics.fmean(r.first_kl for r in mine):>8.2f}{sum(r.first_kl > 5 for r in mine):>6}"
            )
            for slot in SLOTS:
                have = [r.slots[slot] for r in mine if slot in r.slots]
                if not have:
                    cells += f"{'-':>9}{'-':>15}"
                    continue
                kl = statistics.fmean(float(s["kl"]) for s in have)
                hits = sum(bool(s["teacher_top_is_convention"]) for s in have)
                cells += f"{kl:>9.2f}{f'{hits}/{len(have)}':>15}"
            lines.append(cells)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m hermes_opd.learning_study.divergence_probe", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--model", default=str(shipped_student_dir()))
    parser.add_argument("--tasks", type=int, default=8, help="train tasks of each kind")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--out", default=None, help="write the rows as JSON here")
    args = parser.parse_args(argv)
    rows = asyncio.run(probe(args.model, args.tasks, args.seed, args.temperature))
    print(table(rows))
    if args.out:
        Path(args.out).write_text(json.dumps([asdict(r) for r in rows], indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
