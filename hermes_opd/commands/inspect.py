"""`hermes-opd inspect FILE.jsonl --out report.html [--tokenizer DIR]`: a self-contained HTML report.

For every trajectory the report shows the conversation, each assistant turn with its OPD outcome
(status, hint, votes), and the student's generated tokens coloured by
`A_t = teacher_lp(student token) - inference_lp`: red where the teacher disagrees (the token is
suppressed), green where it agrees more than the student did (reinforced), grey where the
difference is small; generated tokens without teacher data stay uncoloured. Hovering a coloured
token shows both logprobs and the teacher's top alternatives (decoded with `--tokenizer`, else ids).

The tokens are rendered server-side: each position with teacher data (see
`hermes_opd.contract.provenance.scored_positions`) is one `<span class="tok scored ...">`, so the page shows its
colours without JavaScript. Tooltip data is embedded once as JSON (one entry per coloured token,
at most 5 alternatives each) and read by a small inline script. No file is loaded at view time: the
CSS, script and SVG plots are all inline.
"""

from __future__ import annotations

import html
import json
import math
import re
import sys
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from environments.delivery.groups_file import iter_groups
from hermes_opd.commands.cli_input import OneLineParser, number_in
from hermes_opd.contract.constants import MASKED, MODE_DENSE_K1
from hermes_opd.contract.provenance import Provenance, TurnRecord, parse_provenance, scored_positions
from hermes_opd.contract.validation import validate_group

TEMPLATE_PATH = Path(__file__).with_name("inspector_template.html")
TOP_ALTERNATIVES = 5
MAX_MESSAGE_CHARS = 4000
MAX_VIOLATIONS_SHOWN = 5
ADVANTAGE_EDGES = (0.1, 0.5, 1.5, 3.0)
"""|A_t| below 0.1 is neutral (z); then shade 1..4 of red (A < 0) or green (A > 0)."""
HISTOGRAM_RANGE = 4.0
HISTOGRAM_BIN = 0.25
STATUS_COLOURS = {
    "scored": "#1a7f37",
    "no_hint": "#6e7781",
    "no_next_state": "#8c959f",
    "judge_error": "#cf222e",
    "teacher_error": "#cf222e",
    "skipped": "#afb8c1",
}

HEAD_SEPARATOR = " \u00b7 "

TokenText = Callable[[int], str]


def ids_as_text(token_id: int) -> str:
    """Token text when no tokenizer is given: the id itself."""
    return f"\u2039{token_id}\u203a"


def load_token_text(tokenizer_dir: str) -> TokenText:
    """Decode single ids with a transformers tokenizer from `tokenizer_dir` (cached per id)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    cache: dict[int, str] = {}

    def text(token_id: int) -> str:
        if token_id not in cache:
            try:
                cache[token_id] = tokenizer.decode([token_id], skip_special_tokens=False)
            except (TypeError, ValueError, OverflowError, IndexError):  # an id the tokenizer lacks
                cache[token_id] = ids_as_text(token_id)
        return cache[token_id]

    return text


def advantage_class(advantage: float | None) -> str:
    """CSS shade for A_t: `z` (neutral), `n1`..`n4` (red, suppress), `p1`..`p4` (green, reinforce)."""
    if advantage is None or not math.isfinite(advantage) or abs(advantage) < ADVANTAGE_EDGES[0]:
        return "z"
    shade = 1 + sum(abs(advantage) >= edge for edge in ADVANTAGE_EDGES[1:])
    return f"{'n' if advantage < 0 else 'p'}{shade}"


def _finite_or_none(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _display(text: str) -> str:
    """Escaped token text with newlines made visible."""
    escaped = html.escape(text, quote=False)
    return escaped.replace("\n", "\u21b5\n") if escaped else "\u2205"


@dataclass
class ReportStats:
    groups: int = 0
    sequences: int = 0
    positions: int = 0
    generated: int = 0
    scored: int = 0
    groups_with_violations: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    judged_by_role: Counter[str] = field(default_factory=Counter)
    """Turns with a next state, by its role."""
    hinted_by_role: Counter[str] = field(default_factory=Counter)
    advantages: list[float] = field(default_factory=list)
    scored_per_turn: list[int] = field(default_factory=list)

    def hint_rate(self, role: str | None = None) -> tuple[int, int]:
        if role is None:
            return sum(self.hinted_by_role.values()), sum(self.judged_by_role.values())
        return self.hinted_by_role[role], self.judged_by_role[role]


@dataclass
class _Sequence:
    """One sequence's arrays, read leniently (a report must render even a broken file)."""

    tokens: list[int]
    masks: list[int]
    inference: list[Any]
    ids_rows: list[Any]
    lp_rows: list[Any]
    scored: np.ndarray
    provenance: Provenance

    @classmethod
    def read(cls, group: dict[str, Any], seq: int) -> _Sequence:
        tokens = list(group["tokens"][seq])
        n = len(tokens)

        def field_of(name: str, default: Any) -> list[Any]:
            value = group.get(name)
            if isinstance(value, list) and seq < len(value) and isinstance(value[seq], list):
                return list(value[seq]) + [default] * max(0, n - len(value[seq]))
            return [default] * n

        overrides = group.get("overrides")
        opd = None
        if isinstance(overrides, list) and seq < len(overrides) and isinstance(overrides[seq], dict):
            opd = overrides[seq].get("opd")
        try:
            scored = scored_positions(group, seq)
        except (TypeError, ValueError, IndexError, KeyError):
            scored = np.zeros(n, dtype=bool)
        if len(scored) != n:  # a row list of the wrong length: keep what lines up
            fitted = np.zeros(n, dtype=bool)
            fitted[: min(n, len(scored))] = scored[:n]
            scored = fitted
        return cls(
            tokens=tokens,
            masks=field_of("masks", MASKED),
            inference=field_of("inference_logprobs", None),
            ids_rows=field_of("distill_token_ids", []),
            lp_rows=field_of("distill_logprobs", []),
            scored=scored,
            provenance=parse_provenance(opd),
        )

    def teacher_row(self, pos: int) -> tuple[list[int], list[float | None]]:
        ids, lps = self.ids_rows[pos], self.lp_rows[pos]
        if not isinstance(ids, list) or not isinstance(lps, list):
            return [], []
        count = min(len(ids), len(lps))
        if not all(isinstance(i, int) for i in ids[:count]):
            return [], []
        return list(ids[:count]), [_finite_or_none(v) for v in lps[:count]]


class ReportBuilder:
    """Accumulates HTML fragments, tooltip data and statistics, group by group."""

    def __init__(self, token_text: TokenText | None) -> None:
        self.token_text = token_text or ids_as_text
        self.decode_alternatives = token_text is not None
        self.parts: list[str] = []
        self.scored_data: list[list[Any]] = []
        self.vocab: dict[int, str] = {}
        self.stats = ReportStats()

    # --- groups and sequences -------------------------------------------------------------------

    def add_group(self, group_index: int, line: int, group: dict[str, Any]) -> None:
        tokens = group.get("tokens")
        self.stats.groups += 1
        scores = group.get("scores") if isinstance(group.get("scores"), list) else []
        self.parts.append(f'<section class="group" id="g{group_index}">')
        n_seqs = len(tokens) if isinstance(tokens, list) else 0
        self.parts.append(
            f"<h2>Group {group_index} <small>(line {line}, {n_seqs} sequences, "
            f"scores {html.escape(', '.join(_fmt_score(s) for s in scores))})</small></h2>"
        )
        violations = validate_group(group, group_index)
        if violations:
            self.stats.groups_with_violations += 1
            kinds = Counter(v.kind for v in violations)
            items = "".join(
                f"<li>seq {v.seq} pos {v.pos}: [{html.escape(v.kind)}] {html.escape(v.message)}</li>"
                for v in violations[:MAX_VIOLATIONS_SHOWN]
            )
            summary = ", ".join(f"{kind} \u00d7{count}" for kind, count in sorted(kinds.items()))
            self.parts.append(
                f'<div class="violations"><b>{len(violations)} contract violation(s)</b>: '
                f"{html.escape(summary)}<ul>{items}</ul></div>"
            )
        messages = group.get("messages") if isinstance(group.get("messages"), list) else []
        for seq in range(n_seqs):
            if not isinstance(tokens[seq], list):
                continue
            score = scores[seq] if seq < len(scores) else None
            seq_messages = messages[seq] if seq < len(messages) and isinstance(messages[seq], list) else []
            self._add_sequence(group_index, seq, _Sequence.read(group, seq), score, seq_messages)
        self.parts.append("</section>")

    def _add_sequence(
        self, group_index: int, seq: int, data: _Sequence, score: Any, messages: list[Any]
    ) -> None:
        n = len(data.tokens)
        generated = sum(1 for m in data.masks if m != MASKED)
        scored = int(np.count_nonzero(data.scored))
        self.stats.sequences += 1
        self.stats.positions += n
        self.stats.generated += generated
        self.stats.scored += scored
        mode = data.provenance.mode
        self.parts.append(f'<div class="seq" id="g{group_index}s{seq}">')
        self.parts.append(
            f"<h3>Sequence {seq} <span class='meta'>score {html.escape(_fmt_score(score))} \u00b7 "
            f"{n} tokens \u00b7 {generated} generated \u00b7 {scored} with teacher data \u00b7 mode "
            f"{html.escape(str(mode))}</span></h3>"
        )
        self.parts.append(_conversation_html(messages))
        rendered = np.zeros(n, dtype=bool)
        turns = data.provenance.turns or [
            TurnRecord(span=s, status="unknown") for s in data.provenance.turn_spans
        ]
        for index, turn in enumerate(turns):
            self._count_turn(turn)
            self._add_turn(index, turn, data, rendered)
        self._add_orphans(data, rendered)
        self.parts.append("</div>")

    def _count_turn(self, turn: TurnRecord) -> None:
        self.stats.statuses[turn.status] += 1
        if turn.status in ("no_next_state", "skipped", "unknown"):
            return
        role = turn.next_state_role if isinstance(turn.next_state_role, str) else "unknown"
        self.stats.judged_by_role[role] += 1
        if turn.hint:
            self.stats.hinted_by_role[role] += 1

    # --- turns and tokens --------------------------------------------------------------------------

    def _add_turn(self, index: int, turn: TurnRecord, data: _Sequence, rendered: np.ndarray) -> None:
        n = len(data.tokens)
        if turn.span is None:
            return
        start, end = max(turn.span[0], 0), min(turn.span[1], n)
        positions = [p for p in range(start, end) if not rendered[p]]
        rendered[positions] = True
        token_html, advantages = self._tokens_html(data, positions)
        n_scored = int(np.count_nonzero(data.scored[positions])) if positions else 0
        if turn.status == "scored":
            self.stats.scored_per_turn.append(n_scored)
        head = [
            f'<span class="badge {html.escape(turn.status)}">{html.escape(turn.status)}</span>',
            f"turn {index}",
            f"tokens [{turn.span[0]}, {turn.span[1]})",
        ]
        if turn.message_index is not None:
            head.append(f"message #{turn.message_index}")
        if turn.next_state_role:
            head.append(f"next state: {html.escape(str(turn.next_state_role))}")
        if turn.votes:
            head.append(html.escape(_votes_text(turn.votes)))
        if turn.teacher_prompt_len is not None:
            head.append(f"teacher prompt {turn.teacher_prompt_len} tokens")
        if n_scored:
            mean = sum(advantages) / len(advantages) if advantages else float("nan")
            head.append(f"{n_scored}/{len(positions)} scored \u00b7 mean A<sub>t</sub> {mean:+.3f}")
        classes = "turn has-scored" if n_scored else "turn"
        self.parts.append(f'<div class="{classes}"><div class="turn-head">{HEAD_SEPARATOR.join(head)}</div>')
        if turn.hint:
            self.parts.append(f'<div class="hint">{html.escape(turn.hint)}</div>')
        self.parts.append(f'<div class="toks">{token_html}</div></div>')

    def _add_orphans(self, data: _Sequence, rendered: np.ndarray) -> None:
        """Generated or scored positions outside every turn span (only in files that break the contract)."""
        generated = np.array([m != MASKED for m in data.masks], dtype=bool)
        leftover = np.nonzero(~rendered & (generated | data.scored))[0].tolist()
        if not leftover:
            return
        token_html, _ = self._tokens_html(data, leftover)
        self.parts.append(
            '<div class="turn orphan has-scored"><div class="turn-head">'
            f"{len(leftover)} generated or scored position(s) outside every turn span "
            f"(first at {leftover[0]})</div>"
            f'<div class="toks">{token_html}</div></div>'
        )

    def _tokens_html(self, data: _Sequence, positions: list[int]) -> tuple[str, list[float]]:
        pieces: list[str] = []
        advantages: list[float] = []
        for pos in positions:
            token = data.tokens[pos]
            text = _display(self.token_text(token))
            if not data.scored[pos]:
                pieces.append(f'<span class="tok gen">{text}</span>')
                continue
            row_ids, row_lps = data.teacher_row(pos)
            teacher_lp = row_lps[row_ids.index(token)] if token in row_ids else None
            inference_lp = _finite_or_none(data.inference[pos])
            if data.provenance.mode == MODE_DENSE_K1:
                row_ids, row_lps = [], []  # a dense_k1 row holds only the student token
            advantage = (
                teacher_lp - inference_lp if teacher_lp is not None and inference_lp is not None else None
            )
            if advantage is not None:
                advantages.append(advantage)
                self.stats.advantages.append(advantage)
            alternatives = row_ids[:TOP_ALTERNATIVES]
            if self.decode_alternatives:
                for token_id in [token, *alternatives]:
                    if token_id not in self.vocab:
                        self.vocab[token_id] = self.token_text(token_id)
            self.scored_data.append(
                [pos, token, teacher_lp, inference_lp, alternatives, row_lps[:TOP_ALTERNATIVES]]
            )
            pieces.append(f'<span class="tok scored {advantage_class(advantage)}">{text}</span>')
        return "".join(pieces), advantages

    # --- page ------------------------------------------------------------------------------------

    def summary_html(self) -> str:
        s = self.stats
        hinted, judged = s.hint_rate()
        negative = sum(1 for a in s.advantages if a < 0)
        cards = [
            (s.groups, "groups"),
            (s.sequences, "sequences"),
            (sum(s.statuses.values()), "assistant turns"),
            (s.statuses.get("scored", 0), "turns scored"),
            (f"{_percent(hinted, judged)}", f"hint rate ({hinted}/{judged} turns with a next state)"),
            (s.scored, f"tokens with teacher data (of {s.generated} generated)"),
            (
                f"{(sum(s.advantages) / len(s.advantages)):+.3f}" if s.advantages else "\u2013",
                "mean A<sub>t</sub>",
            ),
            (_percent(negative, len(s.advantages)), "tokens with A<sub>t</sub> &lt; 0"),
        ]
        if s.groups_with_violations:
            cards.append((s.groups_with_violations, "groups with contract violations"))
        stats_html = "".join(
            f"<div class='stat'><b>{value}</b><span>{label}</span></div>" for value, label in cards
        )
        legend = "".join(
            f'<span class="swatch {cls}">{label}</span>'
            for cls, label in [
                ("n4", "\u2264\u22123"),
                ("n3", "\u22121.5"),
                ("n2", "\u22120.5"),
                ("n1", "\u22120.1"),
                ("z", "\u00b10.1"),
                ("p1", "+0.1"),
                ("p2", "+0.5"),
                ("p3", "+1.5"),
                ("p4", "\u2265+3"),
            ]
        )
        return (
            "<h2>Summary</h2>"
            f'<div class="stats">{stats_html}</div>'
            f'<div class="plots">{self._plots_html()}</div>'
            '<div class="legend">A<sub>t</sub> = teacher_lp \u2212 inference_lp: '
            f'{legend}<span class="swatch gen">no teacher data</span></div>'
            '<div class="controls"><label><input type="checkbox" id="only-scored"> '
            "show only turns with teacher data</label> \u00b7 hover a coloured token for the teacher's "
            "alternatives</div>"
        )

    def _plots_html(self) -> str:
        s = self.stats
        statuses = sorted(s.statuses.items(), key=lambda item: -item[1])
        outcome_svg = _bar_chart(
            [(status, count, STATUS_COLOURS.get(status, "#57606a")) for status, count in statuses],
            lambda v: str(int(v)),
        )
        roles = sorted(s.judged_by_role)
        rate_items = [
            (f"{role} ({s.hinted_by_role[role]}/{s.judged_by_role[role]})", *_rate(s, role)) for role in roles
        ]
        hinted, judged = s.hint_rate()
        rate_items.append((f"all ({hinted}/{judged})", hinted / judged if judged else 0.0, "#0969da"))
        rate_svg = _bar_chart(rate_items, lambda v: f"{100 * v:.0f}%", max_value=1.0)
        edges = np.arange(-HISTOGRAM_RANGE, HISTOGRAM_RANGE + HISTOGRAM_BIN / 2, HISTOGRAM_BIN)
        clipped = np.clip(np.array(s.advantages, dtype=float), -HISTOGRAM_RANGE, HISTOGRAM_RANGE - 1e-9)
        counts, _ = np.histogram(clipped, bins=edges)
        colours = ["#cb181d" if hi <= 0 else "#1a7f37" for hi in edges[1:]]
        advantage_svg = _histogram(counts.tolist(), edges.tolist(), colours, "A_t (clipped to \u00b14)")
        per_turn = np.array(s.scored_per_turn, dtype=float)
        top = max(1.0, float(per_turn.max()) if per_turn.size else 1.0)
        turn_edges = np.linspace(0, top, min(20, int(top)) + 1)
        turn_counts, _ = np.histogram(per_turn, bins=turn_edges)
        per_turn_svg = _histogram(
            turn_counts.tolist(),
            turn_edges.tolist(),
            ["#0969da"] * len(turn_counts),
            "tokens scored per turn",
        )
        return "".join(
            [
                _plot("Turn outcomes", f"{sum(s.statuses.values())} assistant turns", outcome_svg),
                _plot(
                    "Hint rate", "turns given a hint / turns with a next state, by next-state role", rate_svg
                ),
                _plot(
                    "A<sub>t</sub> histogram",
                    f"{len(s.advantages)} tokens; red: teacher disagrees (suppress), green: reinforce",
                    advantage_svg,
                ),
                _plot(
                    "Tokens scored per turn",
                    f"{len(s.scored_per_turn)} scored turns, mean "
                    f"{(per_turn.mean() if per_turn.size else 0):.1f} tokens",
                    per_turn_svg,
                ),
            ]
        )

    def render(self, title: str, subtitle: str) -> str:
        data = {"scored": self.scored_data, "vocab": {str(k): v for k, v in self.vocab.items()}}
        body = self.summary_html() + "\n".join(self.parts)
        values = {
            "TITLE": html.escape(title),
            "SUBTITLE": html.escape(subtitle),
            "BODY": body,
            "DATA": _script_json(data),
        }
        template = TEMPLATE_PATH.read_text(encoding="utf-8")
        return re.sub(r"__(TITLE|SUBTITLE|BODY|DATA)__", lambda m: values[m.group(1)], template)


# --- small HTML/SVG helpers ------------------------------------------------------------------------


def _fmt_score(score: Any) -> str:
    value = _finite_or_none(score)
    return f"{value:g}" if value is not None else str(score)


def _percent(part: int, whole: int) -> str:
    return f"{100 * part / whole:.0f}%" if whole else "\u2013"


def _rate(stats: ReportStats, role: str) -> tuple[float, str]:
    hinted, judged = stats.hint_rate(role)
    return (hinted / judged if judged else 0.0), "#8250df" if role == "user" else "#bf8700"


def _votes_text(votes: dict[str, Any]) -> str:
    if {"positive", "negative"} <= votes.keys():
        text = f"votes {votes.get('positive')}+ / {votes.get('negative')}\u2212"
        if votes.get("unparsed"):
            text += f" / {votes['unparsed']}?"
        if "n" in votes:
            text += f" of {votes['n']}"
        if votes.get("policy"):
            text += f" ({votes['policy']})"
        return text
    return "votes " + ", ".join(f"{k}={v}" for k, v in votes.items())


def _conversation_html(messages: list[Any]) -> str:
    if not messages:
        return '<details class="conv"><summary>Conversation: no messages in this group</summary></details>'
    items = []
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            continue
        role = str(message.get("role", "?"))
        content = message.get("content")
        if isinstance(content, list):
            content = "".join(
                str(part.get("text", "")) if isinstance(part, dict) else str(part) for part in content
            )
        text = "" if content is None else str(content)
        if len(text) > MAX_MESSAGE_CHARS:
            text = text[:MAX_MESSAGE_CHARS] + f"\n[... {len(text) - MAX_MESSAGE_CHARS} more characters]"
        extra = ""
        if message.get("tool_calls"):
            extra = "\n" + json.dumps(message["tool_calls"], ensure_ascii=False, indent=1)[:MAX_MESSAGE_CHARS]
        name = f" \u00b7 {html.escape(str(message['name']))}" if message.get("name") else ""
        items.append(
            f'<div class="msg role-{html.escape(role)}"><div class="role">#{index} {html.escape(role)}{name}</div>'
            f"<pre>{html.escape(text + extra)}</pre></div>"
        )
    return f'<details class="conv"><summary>Conversation ({len(messages)} messages)</summary>{"".join(items)}</details>'


def _plot(title: str, note: str, svg: str) -> str:
    return f'<div class="plot"><h3>{title}</h3><p class="note">{html.escape(note)}</p>{svg}</div>'


def _bar_chart(
    items: list[tuple[str, float, str]], label: Callable[[float], str], max_value: float | None = None
) -> str:
    """Horizontal bars: (label, value, colour) each."""
    if not items:
        return '<svg viewBox="0 0 360 30"><text x="4" y="18">no data</text></svg>'
    row, label_width, bar_width = 22, 150, 170
    top = max_value if max_value is not None else max(value for _, value, _ in items) or 1.0
    height = row * len(items) + 6
    parts = [f'<svg viewBox="0 0 360 {height}" role="img">']
    for i, (name, value, colour) in enumerate(items):
        y = 4 + i * row
        width = max(1.0, bar_width * value / top) if value else 0.0
        parts.append(
            f'<text x="{label_width - 6}" y="{y + 14}" text-anchor="end">{html.escape(name)}</text>'
            f'<rect x="{label_width}" y="{y + 3}" width="{width:.1f}" height="{row - 8}" fill="{colour}" rx="2"/>'
            f'<text x="{label_width + width + 4:.1f}" y="{y + 14}">{html.escape(label(value))}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _histogram(counts: list[int], edges: list[float], colours: list[str], x_label: str) -> str:
    """Vertical bars over `edges` (len(counts) + 1), with a few x ticks and the max count."""
    width, height, left, bottom, top_pad = 360, 150, 30, 30, 10
    if not counts or not any(counts):
        return f'<svg viewBox="0 0 {width} 40"><text x="4" y="20">no data</text></svg>'
    peak = max(counts)
    plot_w, plot_h = width - left - 8, height - bottom - top_pad
    bar_w = plot_w / len(counts)
    parts = [f'<svg viewBox="0 0 {width} {height}" role="img">']
    parts.append(
        f'<line x1="{left}" y1="{top_pad + plot_h}" x2="{left + plot_w}" y2="{top_pad + plot_h}" stroke="#d0d7de"/>'
    )
    for i, (count, colour) in enumerate(zip(counts, colours, strict=True)):
        if not count:
            continue
        h = plot_h * count / peak
        parts.append(
            f'<rect x="{left + i * bar_w + 0.5:.1f}" y="{top_pad + plot_h - h:.1f}" width="{max(bar_w - 1, 0.5):.1f}" '
            f'height="{h:.1f}" fill="{colour}"><title>[{edges[i]:g}, {edges[i + 1]:g}): {count}</title></rect>'
        )
    ticks = sorted({0, len(counts) // 2, len(counts)} | ({len(counts) // 4, 3 * len(counts) // 4}))
    for t in ticks:
        x = left + t * bar_w
        parts.append(
            f'<text x="{x:.1f}" y="{top_pad + plot_h + 14}" text-anchor="middle">{edges[t]:g}</text>'
        )
    parts.append(f'<text x="{left - 4}" y="{top_pad + 8}" text-anchor="end">{peak}</text>')
    parts.append(f'<text x="{left - 4}" y="{top_pad + plot_h}" text-anchor="end">0</text>')
    parts.append(
        f'<text x="{left + plot_w / 2:.1f}" y="{height - 2}" text-anchor="middle">{html.escape(x_label)}</text>'
    )
    parts.append("</svg>")
    return "".join(parts)


def _script_json(data: Any) -> str:
    """JSON safe inside a <script> element (no `</script>`, no HTML comment openers)."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


# --- entry points -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class LoadedGroups:
    groups: list[tuple[int, int, dict[str, Any]]]
    """(group index, line number, group)."""
    invalid_lines: list[tuple[int, str]]


def load_groups(path: str | Path, max_groups: int | None = None) -> LoadedGroups:
    groups: list[tuple[int, int, dict[str, Any]]] = []
    invalid: list[tuple[int, str]] = []
    for line, group, error in iter_groups(path):
        if group is None:
            invalid.append((line, error or "unreadable"))
            continue
        if max_groups is not None and len(groups) >= max_groups:
            break
        groups.append((len(groups), line, group))
    return LoadedGroups(groups, invalid)


def render_report(
    groups: Iterable[tuple[int, int, dict[str, Any]]],
    token_text: TokenText | None = None,
    title: str = "OPD report",
    subtitle: str = "",
) -> str:
    """The whole HTML page for `(group index, line, group)` triples (pure apart from reading the template)."""
    builder = ReportBuilder(token_text)
    for group_index, line, group in groups:
        kept = len(builder.parts)
        try:
            builder.add_group(group_index, line, group)
        except (TypeError, ValueError, KeyError, IndexError, AttributeError, OverflowError) as exc:
            del builder.parts[kept:]  # a group too malformed to draw: named, and the others drawn
            builder.parts.append(
                f'<section class="group"><h2>line {line}: not rendered ({html.escape(type(exc).__name__)}: '
                f"{html.escape(str(exc)[:200])}); run hermes-opd validate on the file</h2></section>"
            )
    return builder.render(title, subtitle)


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(
        prog="hermes-opd inspect",
        description="Render a JSONL file of OPD groups as a self-contained HTML report.",
    )
    parser.add_argument("file", help="JSONL file: one ScoredDataGroup (or {'group': ...}) per line")
    parser.add_argument("--out", required=True, help="HTML file to write")
    parser.add_argument(
        "--tokenizer", default=None, help="tokenizer directory (transformers) to decode tokens"
    )
    parser.add_argument(
        "--max-groups", type=number_in(int, 1, 2**31), default=None, help="render at most this many groups"
    )
    args = parser.parse_args(argv)
    try:
        loaded = load_groups(args.file, args.max_groups)
    except OSError as exc:
        print(f"cannot read {args.file}: {exc}", file=sys.stderr)
        return 2
    for line, error in loaded.invalid_lines:
        print(f"skipping line {line}: {error}", file=sys.stderr)
    try:
        token_text = load_token_text(args.tokenizer) if args.tokenizer else None
    except (OSError, ValueError) as exc:
        print(
            f"hermes-opd inspect: cannot load the tokenizer {args.tokenizer}: {str(exc).splitlines()[0][:200]}",
            file=sys.stderr,
        )
        return 2
    subtitle = f"{args.file} \u00b7 {len(loaded.groups)} group(s)"
    if loaded.invalid_lines:
        subtitle += f" \u00b7 {len(loaded.invalid_lines)} unreadable line(s) skipped"
    if args.tokenizer:
        subtitle += f" \u00b7 tokenizer {args.tokenizer}"
    page = render_report(
        loaded.groups, token_text, title=f"OPD report: {Path(args.file).name}", subtitle=subtitle
    )
    Path(args.out).write_text(page, encoding="utf-8")
    print(f"wrote {args.out} ({len(page.encode('utf-8')) / 1024:.0f} KiB, {len(loaded.groups)} groups)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
