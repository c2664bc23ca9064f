"""Bounded JSON numbers as grammar expressions (pure logic): the integers of a range, written as
`json.dumps` writes them (no leading zeros, `-` for negatives), and the numbers between two integer
bounds with the fraction `output_grammar.BASE_RULES` allows. Used by output_grammar for a schema's
`minimum` / `maximum` (and, for integers, `exclusiveMinimum` / `exclusiveMaximum`)."""

from __future__ import annotations

FRACTION = '("." ("0" | [0-9]* [1-9]))'
"""A number's fraction as `jnumber` writes it."""


def _digit_span(low: str, high: str) -> str:
    """The numerals from `low` to `high` (same length, `low <= high`), leading zeros as given."""
    width = len(low)
    if low == "0" * width and high == "9" * width:
        return f"[0-9]{{{width},{width}}}"
    if width == 1:
        return f'"{low}"' if low == high else f"[{low}-{high}]"
    if low[0] == high[0]:
        return f'"{low[0]}" {_digit_span(low[1:], high[1:])}'
    rest = width - 1
    parts = [f'"{low[0]}" {_digit_span(low[1:], "9" * rest)}']
    if int(high[0]) - int(low[0]) > 1:
        parts.append(f"[{int(low[0]) + 1}-{int(high[0]) - 1}] [0-9]{{{rest},{rest}}}")
    parts.append(f'"{high[0]}" {_digit_span("0" * rest, high[1:])}')
    return "(" + " | ".join(parts) + ")"


def natural_range(low: int, high: int | None) -> str:
    """The numerals of the integers `low..high` (`0 <= low`, `high` None: no upper bound)."""
    if low < 0 or (high is not None and high < low):
        raise ValueError(f"not a range of naturals: {low}..{high}")
    widest = len(str(high)) if high is not None else len(str(low))
    parts = []
    for width in range(len(str(low)), widest + 1):
        start = max(low, 10 ** (width - 1) if width > 1 else 0)
        end = 10**width - 1 if high is None or width < len(str(high)) else high
        if start <= end:
            parts.append(_digit_span(str(start), str(end)))
    if high is None:
        parts.append(f"[1-9] [0-9]{{{widest},-1}}")
    return parts[0] if len(parts) == 1 else "(" + " | ".join(parts) + ")"


def integer_range(low: int | None, high: int | None) -> str:
    """The integers `low..high` as JSON (None: unbounded on that side); `low <= high`."""
    if low is not None and high is not None and low > high:
        raise ValueError(f"empty range {low}..{high}")
    parts = []
    if high is None or high >= 0:
        parts.append(natural_range(max(low or 0, 0), high))
    if low is None or low < 0:
        smallest = 1 if high is None or high >= 0 else -high
        parts.append(f'"-" {natural_range(smallest, None if low is None else -low)}')
    return parts[0] if len(parts) == 1 else "(" + " | ".join(parts) + ")"


def number_range(low: int | None, high: int | None) -> str:
    """The numbers from `low` to `high` inclusive (integer bounds; None: unbounded), each an integer
    part and maybe a fraction: `n.f` lies in the range when its integer part does and is not the
    bound it would cross."""
    if low is not None and high is not None and low > high:
        raise ValueError(f"empty range {low}..{high}")
    parts = []
    if high is None or high >= 0:  # x >= 0: integer part n, x = n.f
        start = max(low or 0, 0)
        if high is None:
            parts.append(f"{natural_range(start, None)} {FRACTION}?")
        else:
            if start <= high - 1:
                parts.append(f"{natural_range(start, high - 1)} {FRACTION}?")
            parts.append(f'"{high}" ("." "0")?')
    if low is None or low < 0:  # x < 0: x = -(m.f); m.f <= -low, and m.f >= -high when high < 0
        floor = 0 if high is None or high >= 0 else -high
        if low is None:
            parts.append(f'"-" {natural_range(floor, None)} {FRACTION}?')
        else:
            if floor <= -low - 1:
                parts.append(f'"-" {natural_range(floor, -low - 1)} {FRACTION}?')
            parts.append(f'"-{-low}" ("." "0")?')
    return parts[0] if len(parts) == 1 else "(" + " | ".join(parts) + ")"
