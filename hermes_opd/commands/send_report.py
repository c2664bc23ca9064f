"""What a replay did, in the lines `hermes-opd send` and `hermes-opd process --send` print at the end."""

from __future__ import annotations

from environments.delivery.group_replay import ReplayResult
from hermes_opd.commands.progress import format_duration


def summary_lines(result: ReplayResult) -> list[str]:
    done = result.acked_lines_before + result.groups_sent
    state = "complete" if result.complete else "stopped"
    lines = [
        f"send {state}: {result.groups_sent} group(s), {result.sequences_sent} sequences, "
        f"{result.tokens_sent:,} tokens acknowledged by the API in {format_duration(result.elapsed_s)} "
        f"({result.groups_per_s:.1f} groups/s); {result.acked_lines_before} line(s) were sent by an earlier run; "
        f"{done} of {result.lines_total} lines done"
    ]
    if result.restarts:
        lines.append(
            f"  the API went away or restarted {result.restarts} time(s); {result.resent_lines} line(s) were sent "
            "again (`hermes-opd train` drops the repeats by id; other trainers would train them twice)"
        )
    if result.invalid:
        verb = "skipped" if result.stopped_at is None else "found"
        lines.append(f"  {len(result.invalid)} invalid group(s) {verb}:")
        lines.extend(f"    line {bad.line}: {bad.message}" for bad in result.invalid[:10])
    if result.stopped_at is not None:
        lines.append(
            f"  stopped at line {result.stopped_at.line}: nothing after it was sent. Fix or remove that line "
            "and rerun, or rerun with --skip-invalid"
        )
    if result.rejected:
        lines.append(f"  {result.rejected} group(s) refused by the API, kept in {result.path}.rejected/")
    if result.still_queued:
        lines.append(
            f"  {result.still_queued} group(s) still wait in the API's queue (fewer than a trainer batch, or no "
            "trainer pulling); if the API restarts before a trainer takes them, rerun with --resend-window"
        )
    if result.torn_tail:
        lines.append("  the last line is incomplete (no newline): rerun when the file is complete")
    if warning := result.drops.warning():
        lines.append(f"  warning: {warning}")
    lines.append(f"  cursor: {result.cursor_path}")
    return lines
