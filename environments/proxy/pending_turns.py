"""Turns the proxy could not deliver before it stopped, kept on disk for the next start.

At `SampleFeed.stop` every turn that is not in a written group (waiting for a retry because the
judge or teacher is down, still queued when the drain window ended, cut off mid-pipeline, in a group
that could not be written, or in a partial group held back to stay batchable) is written here, one
JSON object per line: the `TurnSample`'s exact trajectory and its provenance (session, turn, policy
model and version, attempts, info). The next start reloads them and scores them again.

The file is replaced atomically (temporary file, fsync, rename), so it is either the old list or the
new one; it is removed when nothing is left. It is kept while the reloaded turns are worked on, so a
proxy killed with SIGKILL (no `stop`) loses none of them; those already delivered before the kill are
then delivered once more (at least once; a clean stop is exactly once).
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from environments.delivery.send_spool import write_atomically
from environments.proxy.turn_sample import TurnSample
from hermes_opd.record.trajectory import Trajectory, TurnSpan

logger = logging.getLogger(__name__)

FORMAT = "hermes-opd/pending-turn/1"


def turn_record(sample: TurnSample) -> dict[str, Any]:
    """A JSON-ready record of `sample` (every field of its trajectory, exactly)."""
    t = sample.trajectory
    trajectory = {
        "tokens": t.tokens,
        "masks": t.masks,
        "inference_logprobs": t.inference_logprobs,
        "messages": t.messages,
        "turns": [[s.start, s.end, s.message_index] for s in t.turns],
        "content_ends": [[k, v] for k, v in t.content_ends.items()],
        "tools": t.tools,
        "template_history": t.template_history,
        "sequence_index": t.sequence_index,
        "student_topk": [[p, list(ids), list(lps)] for p, (ids, lps) in t.student_topk.items()],
        "finish_reason": t.finish_reason,
        "score": t.score,
        "info": t.info,
    }
    return {
        "format": FORMAT,
        "session": sample.session,
        "turn": sample.turn,
        "policy_model": sample.policy_model,
        "policy_version": sample.policy_version,
        "attempts": sample.attempts,
        "info": sample.info,
        "trajectory": trajectory,
    }


def turn_from_record(record: dict[str, Any]) -> TurnSample:
    """The `TurnSample` of a `turn_record`. Raises ValueError (KeyError, TypeError) for another shape."""
    if record.get("format") != FORMAT:
        raise ValueError(f"not a pending turn (format {record.get('format')!r})")
    t = record["trajectory"]
    trajectory = Trajectory(
        tokens=list(t["tokens"]),
        masks=list(t["masks"]),
        inference_logprobs=list(t["inference_logprobs"]),
        messages=list(t["messages"]),
        turns=[TurnSpan(int(a), int(b), int(m)) for a, b, m in t["turns"]],
        content_ends={int(k): int(v) for k, v in t["content_ends"]},
        tools=t["tools"],
        template_history=t["template_history"],
        sequence_index=int(t["sequence_index"]),
        student_topk={int(p): (list(ids), list(lps)) for p, ids, lps in t["student_topk"]},
        finish_reason=t["finish_reason"],
        score=float(t["score"]),
        info=dict(t["info"]),
    )
    return TurnSample(
        trajectory,
        str(record["session"]),
        int(record["turn"]),
        str(record["policy_model"]),
        int(record["policy_version"]),
        int(record["attempts"]),
        dict(record["info"]),
    )


def save(path: Path, samples: Iterable[TurnSample]) -> int:
    """Replace `path` with `samples` (removed when there are none). Returns how many were saved.
    Raises OSError when they cannot be written (the old file is then left as it was)."""
    records = [turn_record(s) for s in samples]
    if not records:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        return 0
    data = b"".join(json.dumps(r, separators=(",", ":")).encode("utf-8") + b"\n" for r in records)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, data)
    return len(records)


def load(path: Path) -> tuple[list[TurnSample], int]:
    """(the turns saved in `path`, how many lines were unreadable: each one logged). No file: ([], 0)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return [], 0
    samples: list[TurnSample] = []
    bad = 0
    for number, line in enumerate(raw.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            samples.append(turn_from_record(json.loads(line)))
        except (ValueError, KeyError, TypeError) as exc:
            bad += 1
            logger.error("%s line %d is not a pending turn (%s): skipped", path, number, exc)
    return samples, bad
