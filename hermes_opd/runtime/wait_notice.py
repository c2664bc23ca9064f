"""How often a long wait says what it waits for (`hermes-opd send`, `process`, the start of vLLM,
the demo and the benchmarks)."""

from __future__ import annotations

WAIT_NOTICE_S = 5.0
"""Seconds between two lines of one wait's notice."""
