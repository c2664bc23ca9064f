"""Count non-canonical hint splices in a groups JSONL file (e.g. runs/demo/groups.jsonl).

For every scored turn the teacher input is rebuilt from provenance alone, and the window between
the template boundaries around the hint is decoded and encoded again; a splice is non-canonical
when the ids differ. `--as-v1` checks, on the same records, the splice format version 1 made (the
hint's own ids inserted at the anchor), which gives the "before" figure.

    python scripts/count_noncanonical_splices.py runs/demo/groups.jsonl --tokenizer .cache/dev-model
    python scripts/count_noncanonical_splices.py runs/demo/groups.jsonl --tokenizer .cache/dev-model --as-v1

Prints one JSON object; exit 0 when every splice is canonical, 1 otherwise, 2 on unreadable input.
"""

from __future__ import annotations

import argparse
import json
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path")
    parser.add_argument("--tokenizer", required=True, help="tokenizer directory (the policy's)")
    parser.add_argument("--as-v1", action="store_true", help="check the version-1 splice of the same turns")
    parser.add_argument("--show", type=int, default=3, help="print this many non-canonical examples")
    args = parser.parse_args(argv)

    from transformers import AutoTokenizer

    from environments.delivery.groups_file import iter_groups
    from hermes_opd.record.hint_splice import tokenizer_codec
    from hermes_opd.record.splice_audit import audit_groups

    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    codec = tokenizer_codec(tokenizer)
    groups = []
    for line, group, error in iter_groups(args.path):
        if group is None:
            print(f"line {line}: {error}", file=sys.stderr)
            return 2
        groups.append(group)
    checks = list(audit_groups(groups, as_v1=args.as_v1, **codec))
    bad = [c for c in checks if not c.canonical]
    examples = []
    for c in bad[: args.show]:
        at = next((i for i, (x, y) in enumerate(zip(c.ids, c.reencoded, strict=False)) if x != y), 0)
        lo = max(at - 2, 0)
        examples.append(
            {
                "group": c.group,
                "seq": c.seq,
                "span": list(c.span),
                "teacher_ids": [tokenizer.decode([i]) for i in c.ids[lo : at + 4]],
                "tokenizer_writes": [tokenizer.decode([i]) for i in c.reencoded[lo : at + 4]],
            }
        )
    print(
        json.dumps(
            {
                "file": args.path,
                "splice": "version-1 splice of the same turns" if args.as_v1 else "as recorded",
                "groups": len(groups),
                "scored_turns": len(checks),
                "non_canonical": len(bad),
                "examples": examples,
            },
            indent=2,
        )
    )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
