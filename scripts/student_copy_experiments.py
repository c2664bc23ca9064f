"""Pretraining experiments for the learnable dev student: can a small Qwen2 on the dev BPE learn to copy
a name it was shown, the one skill OPD's teacher (the student plus the hint) needs?

Each run pretrains a fresh student on a mix of batches, then (with --probe) greedy- and T=1-samples
the 24 held-out convention tasks (environments/tasks/conventions.py) with and without the rules
judge's hint, and counts passes (the right file and the right function name). Batches per step:

- `--conv N`: full conversations of hermes_opd/learning_study/student_corpus.py behind the env's system block
  (719 tokens with the tool schemas), the block run once without gradient (student_model.py);
- `--choice N`: the same conversations without the system block;
- `--drill N`: `copy_drill` exchanges;
- `--induct N`: raw token sequences `noise A noise A` (A: 4..--induct-len tokens), loss on the second A.
  `--fixed-offset` drops the noise, so A repeats at a constant distance (a positional shortcut solves it).

`--pseudo N` adds N pseudo-words (2-4 random letter tokens) to the name pool, so names are as long in
tokens as the held-out ones. `--verbatim` writes `def NAME(` as the token `Ġ` + NAME's tokens as they
appear between backticks, so the name can be copied token for token. `--previous-token-head`
initialises layer 0's head 0 to attend to the previous position (by its RoPE query/key biases).
`--init DIR` starts from a saved model instead of a fresh one (a second phase after an induction-only
first phase). `--diagnose DIR` prints the per-token loss of a saved model on a few copy drills.

    python scripts/student_copy_experiments.py --steps 600 --conv 0 --choice 16 --drill 16 \
        --induct 32 --fixed-offset --pseudo 3000 --verbatim --save /tmp/student-E --probe
    python scripts/student_copy_experiments.py --diagnose /tmp/student-E --pseudo 3000 --verbatim
    python scripts/student_copy_experiments.py --steps 1700 --choice 0 --drill 0 --induct 64 \
        --induct-pool pieces --lr 1e-3 --constant-lr --save /tmp/student-induction

The rows and the training loop are hermes_opd/learning_study/student_recipe.py's (one `Phase` per run), so
`hermes-opd dev-model build-student --recipe copy`, which chains the five runs that made the student
Q2, gives the same weights as running them here one after another (checked on short runs, and on
the first four: the student P5, bit for bit). `--hint-rate` is the share of conversations with an
open value whose user message names it (0.6 unless set; Q2's last run used 0.3).
docs/notes/learning-lab.md ("The student") lists the runs and what they measured.
"""

from __future__ import annotations

import argparse
import random
import re
import time

import torch
from transformers import Qwen2ForCausalLM

from environments.atropos.agentic_opd_config import AgenticOPDConfig
from environments.rollout.tools import TOOL_SCHEMAS
from environments.tasks.conventions import convention_values, generate
from hermes_opd.devkit.dev_model import DevModelSpec, dev_tokenizer, qwen2_config
from hermes_opd.learning_study.student_corpus import HINT_SEPARATOR, copy_drill
from hermes_opd.learning_study.student_model import StudentSpec, assistant_mask
from hermes_opd.learning_study.student_recipe import Phase, RecipeCorpus, recipe_corpus, train_phase

SYSTEM_PROMPT = AgenticOPDConfig.model_fields["system_prompt"].default


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for name, default in (
        ("steps", 600),
        ("conv", 0),
        ("choice", 16),
        ("drill", 16),
        ("induct", 0),
        ("induct-len", 16),
        ("pseudo", 0),
        ("hidden", 128),
        ("layers", 3),
        ("heads", 4),
        ("kv-heads", 2),
        ("seed", 0),
    ):
        p.add_argument(f"--{name}", type=int, default=default)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--constant-lr", action="store_true", help="no cosine decay after the warmup")
    p.add_argument(
        "--induct-pool",
        choices=("words", "pieces"),
        default="words",
        help="tokens of the name pool, or every 1-4 letter token of the vocabulary",
    )
    p.add_argument("--fixed-offset", action="store_true")
    p.add_argument("--verbatim", action="store_true")
    p.add_argument(
        "--hint-rate",
        type=float,
        default=0.6,
        help="share of conversations with an open value that name it in an instruction",
    )
    p.add_argument("--previous-token-head", action="store_true")
    p.add_argument("--probe", action="store_true", help="probe the held-out tasks at the end")
    p.add_argument("--probe-only", default="", help="a saved model: probe it and stop")
    p.add_argument("--save", default="")
    p.add_argument("--init", default="", help="start from a saved model (e.g. an induction-first run)")
    p.add_argument("--diagnose", default="", help="a saved model: print per-token drill losses and stop")
    return p.parse_args()


def phase_from(args: argparse.Namespace) -> Phase:
    return Phase(
        name="experiment",
        steps=args.steps,
        conv=args.conv,
        choice=args.choice,
        drill=args.drill,
        induct=args.induct,
        induct_len=args.induct_len,
        induct_pool=args.induct_pool,
        fixed_offset=args.fixed_offset,
        pseudo=args.pseudo,
        verbatim=args.verbatim,
        hint_rate=args.hint_rate,
        lr=args.lr,
        constant_lr=args.constant_lr,
        seed=args.seed,
    )


def corpus_from(args: argparse.Namespace) -> RecipeCorpus:
    return recipe_corpus(
        dev_tokenizer(DevModelSpec()),
        TOOL_SCHEMAS,
        SYSTEM_PROMPT,
        frozenset(convention_values()),
        phase_from(args),
    )


def install_previous_token_head(model, amplitude: float = 6.0, pairs: int = 8) -> None:
    """Layer 0, query head 0 (and its KV head): zero query/key weights and RoPE biases whose score peaks
    at the previous position (measured: 97.5% of the head's attention there on random 800-token input)."""
    cfg = model.config
    d = cfg.hidden_size // cfg.num_attention_heads
    theta = cfg.rope_parameters["rope_theta"]
    inv = 1.0 / (theta ** (torch.arange(0, d, 2).float() / d))
    bias_k, bias_q = torch.zeros(d), torch.zeros(d)
    for j in range(pairs):  # RoPE pair j is components (j, j + d/2); rotate the query by one position back
        bias_k[j] = amplitude
        bias_q[j], bias_q[j + d // 2] = amplitude * torch.cos(-inv[j]), amplitude * torch.sin(-inv[j])
    attn = model.model.layers[0].self_attn
    with torch.no_grad():
        attn.q_proj.weight[:d] = 0
        attn.q_proj.bias[:d] = bias_q
        attn.k_proj.weight[:d] = 0
        attn.k_proj.bias[:d] = bias_k


def rules_hint(task) -> str:
    """The rules judge's text for a wrong attempt at `task` (judge/rules_backend.py)."""
    if task.kind == "name":
        return (
            f"The tests could not import the name `{task.function}` from the module `{task.module}`. "
            f"These tests fail: test_0, test_1, test_2. Define `{task.function}` in `{task.module}.py`, "
            "with exactly that name."
        )
    return (
        f"The checker looks for `{task.module}.py`, and that file does not exist. These tests fail: "
        f"test_0, test_1, test_2, test. Write the solution to `{task.module}.py`."
    )


@torch.no_grad()
def probe(model, corpus: RecipeCorpus, samples: int = 2) -> dict[str, str]:
    """On the held-out tasks, per (hint or not) x (greedy, T=1): `convention` counts answers whose file
    and function name are right; `pass` also needs the body `return <the task's expression>`, which
    is what the verifier's checks need (a probe, not the verifier)."""
    model.eval()
    tok, out = corpus.tok, {}
    for hinted in (False, True):
        for temperature in (0.0, 1.0):
            convention = passed = n = 0
            for task in generate()["heldout"]:
                prompt = task.prompt() + (HINT_SEPARATOR + rules_hint(task) if hinted else "")
                messages = [
                    {"role": "system", "content": corpus.system_prompt},
                    {"role": "user", "content": prompt},
                ]
                ids = torch.tensor([corpus.encode(messages, TOOL_SCHEMAS, generation_prompt=True)])
                for _ in range(1 if temperature == 0 else samples):
                    gen = model.generate(
                        ids,
                        max_new_tokens=60,
                        do_sample=temperature > 0,
                        temperature=temperature or None,
                        top_k=0,
                        eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
                        pad_token_id=tok.pad_token_id,
                    )
                    text = tok.decode(gen[0, ids.shape[1] :])
                    path = re.search(r'"path": "([^"]+)"', text)
                    name = re.search(r"def (\w+)\(", text)
                    body = re.search(r"return (x [-+*] \d+)\\n", text)
                    right = bool(
                        path
                        and name
                        and path.group(1) == f"{task.module}.py"
                        and name.group(1) == task.function
                    )
                    convention += right
                    passed += right and bool(body) and body.group(1) == task.expression
                    n += 1
            key = f"{'hint' if hinted else 'no_hint'}_T{temperature:g}"
            out[key] = f"convention {convention}/{n}, pass {passed}/{n}"
    model.train()
    return out


def diagnose(path: str, corpus: RecipeCorpus) -> None:
    model = Qwen2ForCausalLM.from_pretrained(path).eval()
    rng = random.Random(5)
    for _ in range(3):
        messages = copy_drill(rng, corpus.words)
        ids = corpus.encode(messages, None)
        mask = assistant_mask(ids, corpus.tok)
        with torch.no_grad():
            logprobs = torch.log_softmax(model(torch.tensor([ids])).logits[0], -1)
        print(messages[0]["content"])
        cells = []
        for j in range(1, len(ids)):
            if mask[j]:
                token, best = corpus.tok.convert_ids_to_tokens([ids[j], int(logprobs[j - 1].argmax())])
                miss = "" if best == token else f"[{best}]"
                cells.append(f"{token}:{-logprobs[j - 1, ids[j]].item():.1f}{miss}")
        print(" ".join(cells))


def main() -> None:
    args = parse_args()
    torch.set_num_threads(1)
    corpus = corpus_from(args)
    if args.diagnose:
        diagnose(args.diagnose, corpus)
        return
    if args.probe_only:
        print(
            "held-out passes:", probe(Qwen2ForCausalLM.from_pretrained(args.probe_only), corpus), flush=True
        )
        return
    spec = StudentSpec(
        hidden_size=args.hidden,
        intermediate_size=3 * args.hidden,
        num_layers=args.layers,
        num_heads=args.heads,
        num_kv_heads=args.kv_heads,
    )
    torch.manual_seed(args.seed)
    model = (
        Qwen2ForCausalLM.from_pretrained(args.init)
        if args.init
        else Qwen2ForCausalLM(qwen2_config(spec, corpus.tok))
    )
    if args.previous_token_head:
        install_previous_token_head(model)
    print(
        f"params {sum(p.numel() for p in model.parameters())}, names {len(corpus.words)}, "
        f"induction pool {len(corpus.pool)}",
        flush=True,
    )
    started = time.monotonic()

    def progress(step: int, steps: int, parts: dict[str, float]) -> None:
        if step % 25 == 0:
            shown = " ".join(f"{k} {v:.3f}" for k, v in parts.items())
            print(f"step {step}: {shown} ({time.monotonic() - started:.0f}s)", flush=True)

    train_phase(model, corpus, progress)
    if args.save:
        model.save_pretrained(args.save)
        corpus.tok.save_pretrained(args.save)
    if args.probe:
        print("held-out passes:", probe(model, corpus), flush=True)


if __name__ == "__main__":
    main()
