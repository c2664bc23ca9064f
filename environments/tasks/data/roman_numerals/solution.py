_VALUES = [
    (1000, "M"),
    (900, "CM"),
    (500, "D"),
    (400, "CD"),
    (100, "C"),
    (90, "XC"),
    (50, "L"),
    (40, "XL"),
    (10, "X"),
    (9, "IX"),
    (5, "V"),
    (4, "IV"),
    (1, "I"),
]
_DIGITS = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}


def to_roman(n):
    if not isinstance(n, int) or not 1 <= n <= 3999:
        raise ValueError("n must be in 1..3999")
    out = []
    for value, numeral in _VALUES:
        count, n = divmod(n, value)
        out.append(numeral * count)
    return "".join(out)


def from_roman(s):
    if not s or any(ch not in _DIGITS for ch in s):
        raise ValueError(f"invalid roman numeral: {s!r}")
    total = 0
    for i, ch in enumerate(s):
        value = _DIGITS[ch]
        if i + 1 < len(s) and _DIGITS[s[i + 1]] > value:
            total -= value
        else:
            total += value
    return total
