"""`hermes-opd send GROUPS.jsonl --api URL`: replay a collected groups file into the Atropos API.

Every Atropos trainer (`hermes-opd train`, tinker-atropos, ...) reads from the API's `/batch`; this
puts a file written by `hermes-opd process` (or any file `hermes-opd validate` reads) there, with a
progress bar, a rate limit, and a cursor file next to the input so that a rerun of the same command
after a kill or an API restart continues without losing a group (environments/delivery/group_replay.py says how).

The file is checked BEFORE the API is contacted: every line is read (within the bounds of
`hermes_opd.contract.bounded_json.GROUPS_INPUT`) and validated against the contract; a bad line is
named with its number and nothing is sent (or, with --skip-invalid, it is skipped and listed).

Exit codes: 0 every line was sent (or skipped as invalid with --skip-invalid); 1 stopped at an
invalid group found during the send (the file changed), the file ends in an incomplete line, or
the API stayed away (`--give-up-after`); 2 bad input, found before anything is sent (a missing or
empty file, lines that are not valid groups, a bad flag, a cursor of another file); 130 Ctrl-C.
A rerun continues.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

from environments.delivery.group_replay import APIGoneError, GroupReplayer, ReplayOptions, ReplayResult
from environments.delivery.groups_file import iter_groups
from environments.delivery.send_cursor import CursorError
from hermes_opd.commands.cli_input import OneLineParser, add_pacing_arguments, options_from, pacing_error
from hermes_opd.commands.progress import format_duration
from hermes_opd.commands.send_report import summary_lines
from hermes_opd.contract.validation import validate_group
from hermes_opd.runtime.cli_flags import add_atropos_url
from hermes_opd.runtime.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_SIGINT, EXIT_USAGE

FIRST_PROBLEMS = 20


class SendProgress:
    """A tqdm bar (groups, sequences, tokens, ETA) on a terminal; a line every `every_s` otherwise."""

    def __init__(self, total: int, initial: int, mode: str = "auto", every_s: float = 5.0) -> None:
        self.mode = ("bar" if sys.stderr.isatty() else "lines") if mode == "auto" else mode
        self.total, self.initial = total, initial
        self.every_s = every_s
        self._last_line = 0.0
        self._started = time.monotonic()
        self._bar = None
        if self.mode == "bar":
            from tqdm import tqdm

            self._bar = tqdm(total=total, initial=initial, unit="group", desc="send", dynamic_ncols=True)

    def update(self, result: ReplayResult) -> None:
        done = result.acked_lines_before + result.groups_sent
        if self._bar is not None:
            self._bar.n = min(done, self.total)
            self._bar.set_postfix(seqs=result.sequences_sent, tokens=result.tokens_sent, refresh=False)
            self._bar.refresh()
        elif self.mode == "lines" and time.monotonic() - self._last_line >= self.every_s:
            self._last_line = time.monotonic()
            rate = result.groups_sent / max(time.monotonic() - self._started, 1e-9)
            left = max(self.total - done, 0)
            eta = format_duration(left / rate) if rate > 0 else "?"
            print(
                f"[{done}/{self.total}] sent {result.groups_sent} groups, {result.sequences_sent} sequences, "
                f"{result.tokens_sent:,} tokens; {rate:.1f} groups/s; ETA {eta}",
                file=sys.stderr,
                flush=True,
            )

    def message(self, text: str) -> None:
        if self._bar is not None:
            self._bar.write(text, file=sys.stderr)
        elif self.mode != "none" or text:
            print(text, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="hermes-opd send",
        description="Replay a groups JSONL file into an Atropos API (for any Atropos trainer), resumable.",
        epilog="See docs/process.md, 'Collect here, train there'.",
    )
    parser.add_argument("file", help="groups JSONL (as written by `hermes-opd process`)")
    add_atropos_url(parser, "--api", required=True)
    add_pacing_arguments(parser)
    parser.add_argument(
        "--skip-invalid",
        action="store_true",
        help="skip (and list) invalid groups instead of stopping at one",
    )
    parser.add_argument(
        "--resend-window",
        action="store_true",
        help="send again the groups the API may still have held when the cursor was last written "
        "(after an API restart while no sender ran); `hermes-opd train` drops the repeats",
    )
    parser.add_argument(
        "--no-drain", action="store_true", help="exit without waiting for the API's queue to empty"
    )
    parser.add_argument(
        "--give-up-after", type=float, default=3600.0, metavar="S", help="stop when the API is away this long"
    )
    parser.add_argument("--progress", choices=("auto", "bar", "lines", "none"), default="auto")
    return parser


async def _run(path: Path, options: ReplayOptions, progress_mode: str) -> ReplayResult:
    from environments.delivery.group_replay import count_lines
    from environments.delivery.send_cursor import cursor_path, load_cursor

    initial = load_cursor(cursor_path(path)).acked_lines
    progress = SendProgress(count_lines(path), initial, mode=progress_mode)
    try:
        replayer = GroupReplayer(path, options, on_progress=progress.update, on_message=progress.message)
        return await replayer.run()
    finally:
        progress.close()


def file_problems(path: Path) -> tuple[int, list[str]]:
    """(groups, "line N: why" for every line that is not a valid group), read before the API is
    contacted. A torn last line (no newline yet: a file still being written) is not a problem."""
    groups, problems, last = 0, [], 0
    for line, group, error in iter_groups(path):
        last = line
        if group is None:
            problems.append((line, error or "unreadable"))
            continue
        groups += 1
        violations = validate_group(group, group_index=line - 1)
        if violations:
            first = violations[0]
            more = f" (and {len(violations) - 1} more)" if len(violations) > 1 else ""
            problems.append((line, f"[{first.kind}] {first.message}{more}"))
    if problems and problems[-1][0] == last and not _ends_with_newline(path):
        problems.pop()
    return groups, [f"line {line}: {why}" for line, why in problems]


def _ends_with_newline(path: Path) -> bool:
    with open(path, "rb") as handle:
        handle.seek(0, 2)
        if handle.tell() == 0:
            return True
        handle.seek(-1, 2)
        return handle.read(1) == b"\n"


def _check_file(path: Path, skip_invalid: bool) -> str | None:
    """Why the file must not be sent (one line per bad line, then what to do), or None."""
    try:
        groups, problems = file_problems(path)
    except OSError as exc:
        return f"cannot read {path}: {exc.strerror or exc}"
    if not groups and not problems:
        return f"{path}: no groups: the file is empty (or holds only blank lines)"
    if not problems or skip_invalid:
        return None
    shown = [f"{path}: {p}" for p in problems[:FIRST_PROBLEMS]]
    if len(problems) > FIRST_PROBLEMS:
        shown.append(f"... and {len(problems) - FIRST_PROBLEMS} more")
    shown.append(
        f"{len(problems)} line(s) of {path} are not valid groups; nothing was sent. Fix or remove them, "
        "or rerun with --skip-invalid"
    )
    return "\nhermes-opd send: ".join(shown)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    path = Path(args.file)
    if not path.is_file():
        print(f"hermes-opd send: {path} is not a file", file=sys.stderr)
        return EXIT_USAGE
    if error := pacing_error(args):
        print(f"hermes-opd send: {error}", file=sys.stderr)
        return EXIT_USAGE
    if error := _check_file(path, args.skip_invalid):
        print(f"hermes-opd send: {error}", file=sys.stderr)
        return EXIT_USAGE
    try:
        result = asyncio.run(_run(path, options_from(args, args.atropos_url), args.progress))
    except KeyboardInterrupt:
        print("hermes-opd send: interrupted; rerun the same command to continue", file=sys.stderr)
        return EXIT_SIGINT
    except CursorError as exc:
        print(f"hermes-opd send: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except APIGoneError as exc:
        print(f"hermes-opd send: {exc}", file=sys.stderr)
        return EXIT_FAILED
    for line in summary_lines(result):
        print(line)
    return EXIT_OK if result.complete else EXIT_FAILED


if __name__ == "__main__":
    raise SystemExit(main())
