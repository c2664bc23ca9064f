"""`hermes-opd dev-model build|build-student`: build the tiny local dev model (no downloads), or
pretrain the learnable dev student."""

from __future__ import annotations

import argparse


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hermes-opd dev-model", description=__doc__.split("\n\n")[0])
    actions = parser.add_subparsers(dest="action", required=True)
    build = actions.add_parser("build", help="write tokenizer, chat template and weights to DIR")
    build.add_argument("dir")
    build.add_argument("--seed", type=int, default=0)
    build.add_argument("--if-missing", action="store_true", help="do nothing when DIR already holds a build")
    build.add_argument(
        "--architecture",
        choices=["qwen2", "qwen3"],
        default="qwen2",
        help="qwen3: the same tokenizer, sizes and fit as a Qwen3, for the local Tinker-API server",
    )
    build.add_argument(
        "--agent",
        action="store_true",
        help="the agent dev model instead (64k context; answers any client's tools with one call, then a "
        "short answer, and the judge in its format: docs/proxy/dev-model.md)",
    )
    build.set_defaults(handler=_build)
    student = actions.add_parser(
        "build-student",
        help="pretrain the learnable dev student (tool-call format, following a named value) into DIR",
    )
    student.add_argument("dir", nargs="?", default=None, help="default: <cache>/dev-student")
    student.add_argument("--seed", type=int, default=0, help="the conversations recipe's seed")
    student.add_argument(
        "--recipe",
        choices=("conversations", "copy", "corrections"),
        default="conversations",
        help="conversations (minutes); copy: induction first, then the mix (about 50 min on one core; "
        "the student of docs/notes/learning-lab.md that learns under OPD, shipped as student_q2); "
        "corrections: student_q2 continued on a person's corrections (about 5 min; shipped as student_q2c)",
    )
    student.add_argument(
        "--if-missing", action="store_true", help="do nothing when DIR already holds a build"
    )
    student.set_defaults(handler=_build_student)
    return parser


def _build(args: argparse.Namespace) -> int:
    from hermes_opd.devkit.dev_model import DevModelSpec, build_dev_model, is_built

    if args.agent:
        from hermes_opd.devkit.agent_dev_model import AgentModelSpec, build_agent_model, is_agent_built

        if not (args.if_missing and is_agent_built(args.dir)):
            build_agent_model(args.dir, AgentModelSpec(seed=args.seed))
        print(f"agent dev model at {args.dir}")
        return 0
    if args.if_missing and is_built(args.dir, architecture=args.architecture):
        print(f"dev model already built at {args.dir}")
        return 0
    build_dev_model(args.dir, DevModelSpec(seed=args.seed), architecture=args.architecture)
    print(f"dev model written to {args.dir}")
    return 0


def _build_student(args: argparse.Namespace) -> int:
    from hermes_opd.commands.student_build import build_student_for_env

    return build_student_for_env(args.dir, seed=args.seed, if_missing=args.if_missing, recipe=args.recipe)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.handler(args) or 0)
