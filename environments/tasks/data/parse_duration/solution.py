import re

_PATTERN = re.compile(r"(?:(\d+)d)? *(?:(\d+)h)? *(?:(\d+)m)? *(?:(\d+)s)?")
_SECONDS = (86400, 3600, 60, 1)


def parse_duration(text):
    stripped = text.strip()
    match = _PATTERN.fullmatch(stripped)
    if not stripped or match is None or all(g is None for g in match.groups()):
        raise ValueError(f"invalid duration: {text!r}")
    return sum(int(g) * unit for g, unit in zip(match.groups(), _SECONDS, strict=True) if g is not None)
