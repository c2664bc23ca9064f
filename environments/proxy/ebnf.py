"""EBNF text for the grammars vLLM's structured outputs take (xgrammar's dialect; pure logic)."""

from __future__ import annotations


def literal(text: str) -> str:
    """`text` as an EBNF string literal."""
    out = []
    for char in text:
        if char in '"\\':
            out.append("\\" + char)
        elif char == "\n":
            out.append("\\n")
        elif char == "\t":
            out.append("\\t")
        elif char == "\r":
            out.append("\\r")
        elif ord(char) < 0x20:
            out.append(f"\\x{ord(char):02x}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'
