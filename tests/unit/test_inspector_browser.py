"""The inspector report in a real browser: headless Chromium (Debian package `chromium`).

Proves that the DOM a browser builds holds one coloured token element per position with teacher
data, that the inline script runs without error (it marks <body data-ready="1">), that the tooltip
works, and that a screenshot renders. Set HERMES_OPD_SCREENSHOT_DIR to keep the PNG.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from hermes_opd.commands.inspect import main
from tests.support.groups import build_group, to_dense_group
from tests.support.inspector import TokenCounter, count_scored

CHROMIUM = Path("/usr/bin/chromium")

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason="headless Chromium is not installed (/usr/bin/chromium); apt-get install -y chromium",
)


def chromium(profile: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    command = [
        str(CHROMIUM),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--host-resolver-rules=MAP * ~NOTFOUND",
        f"--user-data-dir={profile}",
        *args,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> tuple[Path, int]:
    tmp = tmp_path_factory.mktemp("browser")
    groups = [build_group(seed=seed, group_size=3) for seed in range(3)] + [
        to_dense_group(build_group(seed=7))
    ]
    source = tmp / "groups.jsonl"
    source.write_text("".join(json.dumps(g) + "\n" for g in groups), encoding="utf-8")
    out = tmp / "report.html"
    assert main([str(source), "--out", str(out)]) == 0
    return out, count_scored(groups)


def dump_dom(profile: Path, url: str) -> str:
    result = chromium(profile, "--window-size=1280,1400", "--virtual-time-budget=2000", "--dump-dom", url)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def test_browser_dom_has_one_coloured_token_per_scored_position(report, tmp_path):
    out, expected = report
    dom = dump_dom(tmp_path / "profile", out.as_uri())
    counter = TokenCounter()
    counter.feed(dom)
    assert counter.scored == expected > 0
    assert 'data-ready="1"' in dom, "the inline script did not finish"
    assert f'data-scored-tokens="{expected}"' in dom
    assert "data-error=" not in dom


def test_tooltip_shows_teacher_alternatives(report, tmp_path):
    out, _ = report
    dom = dump_dom(tmp_path / "profile", out.as_uri() + "#tip")
    assert 'id="tip" role="tooltip" style="display: block;' in dom
    assert "teacher top-" in dom and "(suppress)" in dom
    assert " active" in dom


def test_screenshot_renders(report, tmp_path):
    out, _ = report
    png = tmp_path / "report.png"
    result = chromium(
        tmp_path / "profile",
        "--window-size=1280,1400",
        "--hide-scrollbars",
        "--virtual-time-budget=2000",
        f"--screenshot={png}",
        out.as_uri() + "#tip",
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    keep = os.environ.get("HERMES_OPD_SCREENSHOT_DIR")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(png, Path(keep) / "inspector-report.png")
    try:
        from PIL import Image
    except ImportError:
        return
    with Image.open(png) as image:
        colours = image.convert("RGB").getcolors(maxcolors=1_000_000)
    assert colours is not None and len(colours) > 50, "the screenshot is (nearly) blank"
