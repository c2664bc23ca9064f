"""Run a bench in-process and check the shape of its record."""

from __future__ import annotations

import json
import math

from hermes_opd.bench import cli


def run_bench(capsys, argv: list[str]) -> dict:
    assert cli.main([*argv, "--json"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
    return json.loads(lines[-1])


def numbers(value, path=""):
    """Every number in a result object, with its path."""
    if isinstance(value, bool):
        return
    if isinstance(value, int | float):
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from numbers(item, f"{path}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from numbers(item, f"{path}[{i}]")


def assert_shape(result: dict, headline: str) -> float:
    assert list(result)[-1] == headline
    for path, value in numbers(result):
        assert math.isfinite(value), path
        assert value >= 0, path
    ratio = result[headline]
    assert isinstance(ratio, float) and math.isfinite(ratio) and ratio > 0
    return ratio
