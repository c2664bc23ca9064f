"""Tests for hermes_opd.commands.inspect: the HTML report, checked as parsed HTML (no browser)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from hermes_opd.commands.inspect import advantage_class, main, render_report
from hermes_opd.contract.constants import MASKED
from tests.support.groups import VOCAB, build_group, to_dense_group
from tests.support.inspector import TokenCounter, count_scored

_RAW_WORDS = (
    "I will run the tests first . Then fix utils .py and report back : pytest -q passed failed error line "
    "def return None import os assert == 0 1 <tool_call> </tool_call> { } name terminal command cat ls grep "
    "done All now again look bug in function value list dict self x y print open read write file call check"
)
WORDS = (
    ["<unk>"] + [w if w in {".", ":", ".py"} else " " + w for w in _RAW_WORDS.split()] + ["<|im_end|>", "\n"]
)
"""One word per token id of `build_group`'s 64-id vocabulary, for a readable decoded report."""
assert len(WORDS) == VOCAB, len(WORDS)


def parse(page: str) -> TokenCounter:
    counter = TokenCounter()
    counter.feed(page)
    return counter


def count_nonempty_rows(groups: list[dict]) -> int:
    return sum(1 for g in groups for rows in g["distill_token_ids"] for row in rows if row)


def write_groups(path: Path, groups: list[dict]) -> Path:
    path.write_text("".join(json.dumps(g) + "\n" for g in groups), encoding="utf-8")
    return path


@pytest.fixture
def topk_groups() -> list[dict]:
    return [build_group(seed=seed, group_size=3) for seed in range(4)]


def test_scored_token_elements_match_positions_with_rows(tmp_path, topk_groups, capsys):
    source = write_groups(tmp_path / "groups.jsonl", topk_groups)
    out = tmp_path / "report.html"
    assert main([str(source), "--out", str(out)]) == 0
    assert "wrote" in capsys.readouterr().out
    page = out.read_text(encoding="utf-8")
    counter = parse(page)
    expected = count_nonempty_rows(topk_groups)
    assert expected > 0
    assert counter.scored == expected == count_scored(topk_groups)
    generated = sum(1 for g in topk_groups for masks in g["masks"] for m in masks if m != MASKED)
    assert counter.generated_unscored == generated - expected
    data = json.loads(counter.data_text)
    assert len(data["scored"]) == expected
    assert all(len(entry[4]) <= 5 and len(entry[4]) == len(entry[5]) for entry in data["scored"])
    assert data["vocab"] == {}  # no tokenizer: alternatives are shown as ids


def test_hints_votes_and_statuses_are_shown(tmp_path, topk_groups):
    page = render_report([(i, i + 1, g) for i, g in enumerate(topk_groups)])
    counter = parse(page)
    hints = {
        turn["hint"]
        for g in topk_groups
        for o in g["overrides"]
        for turn in o["opd"]["turns"]
        if turn.get("hint")
    }
    assert hints and hints == set(counter.hints)
    assert "votes 2+ / 1\u2212 of 3 (majority)" in page
    assert 'class="badge no_hint"' in page and 'class="badge no_next_state"' in page
    assert "Turn outcomes" in page and "Hint rate" in page and "histogram" in page
    assert "Tokens scored per turn" in page
    assert page.count("<svg") >= 4


def test_page_is_self_contained(tmp_path, topk_groups):
    page = render_report([(0, 1, topk_groups[0])], title="t")
    counter = parse(page)
    assert counter.resource_urls == []
    assert "http://" not in page and "https://" not in page
    assert not re.search(r"<link\b|@import|url\(", page, re.IGNORECASE)
    assert not re.search(r"<script[^>]+\bsrc=", page, re.IGNORECASE)


def test_message_text_is_escaped_and_data_block_cannot_break_out(tmp_path):
    group = build_group(seed=1)
    group["messages"][0][1]["content"] = "evil </script><script>alert(1)</script> <b>bold</b> & more"
    group["overrides"][0]["opd"]["turns"][0]["hint"] = "use <code> & </script> carefully"
    page = render_report([(0, 1, group)], token_text=lambda i: "</script>" if i == 5 else f"w{i}")
    assert "<script>alert(1)" not in page
    assert "&lt;/script&gt;&lt;script&gt;alert(1)" in page
    assert page.count("</script>") == 2  # the data block and the inline script, nothing else
    counter = parse(page)
    json.loads(counter.data_text)  # still valid JSON


def test_dense_k1_file_colours_only_scored_turns(tmp_path):
    groups = [to_dense_group(build_group(seed=s)) for s in range(2)]
    counter = parse(render_report([(i, i + 1, g) for i, g in enumerate(groups)]))
    assert counter.scored == count_scored(groups) > 0
    assert counter.scored < count_nonempty_rows(groups)  # dense rows exist at every position


def test_broken_file_still_renders_every_row_and_flags_violations():
    group = build_group(seed=2)
    for seq, rows in enumerate(group["distill_token_ids"]):
        for pos, row in enumerate(rows):
            if not row:  # the reference's padding: token 0 with logprob 0.0 everywhere else
                rows[pos] = [0]
                group["distill_logprobs"][seq][pos] = [0.0]
    page = render_report([(0, 1, group)])
    counter = parse(page)
    assert counter.scored == count_nonempty_rows([group]) == sum(len(t) for t in group["tokens"])
    assert "contract violation(s)" in page and "zero_padding" in page
    assert "outside every turn span" in page


def test_tokenizer_decodes_tokens_and_alternatives(tmp_path, topk_groups):
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    vocab = {word: i for i, word in enumerate(WORDS)}
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>")), unk_token="<unk>"
    )
    tokenizer.save_pretrained(tmp_path / "tok")
    source = write_groups(tmp_path / "groups.jsonl", topk_groups[:2])
    out = tmp_path / "report.html"
    assert main([str(source), "--out", str(out), "--tokenizer", str(tmp_path / "tok")]) == 0
    page = out.read_text(encoding="utf-8")
    counter = parse(page)
    assert counter.scored == count_nonempty_rows(topk_groups[:2])
    data = json.loads(counter.data_text)
    first_alternative = data["scored"][0][4][0]
    assert data["vocab"][str(first_alternative)] == WORDS[first_alternative]
    token_text = re.search(r'<span class="tok scored [a-z0-9]+">([^<]*)</span>', page).group(1)
    assert token_text in {w.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;") for w in WORDS}


def test_html_size_stays_reasonable(topk_groups):
    page = render_report([(i, i + 1, g) for i, g in enumerate(topk_groups)])
    positions = sum(len(t) for g in topk_groups for t in g["tokens"])
    assert len(page.encode("utf-8")) < 30_000 + 400 * positions


@pytest.mark.parametrize(
    ("advantage", "expected"),
    [
        (None, "z"),
        (float("nan"), "z"),
        (0.05, "z"),
        (-0.05, "z"),
        (-0.2, "n1"),
        (0.7, "p2"),
        (-2.0, "n3"),
        (5, "p4"),
    ],
)
def test_advantage_class(advantage, expected):
    assert advantage_class(advantage) == expected


def test_unreadable_input_exits_two(tmp_path, capsys):
    assert main([str(tmp_path / "missing.jsonl"), "--out", str(tmp_path / "r.html")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_ragged_row_lists_and_max_groups(tmp_path, topk_groups):
    broken = build_group(seed=8)
    del broken["distill_token_ids"][0][-3:]
    del broken["distill_logprobs"][0][-3:]
    page = render_report([(0, 1, broken)])
    assert parse(page).scored == count_nonempty_rows([broken])
    assert "shape" in page
    source = write_groups(tmp_path / "groups.jsonl", topk_groups)
    out = tmp_path / "report.html"
    assert main([str(source), "--out", str(out), "--max-groups", "2"]) == 0
    assert parse(out.read_text(encoding="utf-8")).scored == count_nonempty_rows(topk_groups[:2])
