"""How often a long wait says what it waits for (`hermes-opd send`, `process`, the benchmarks)."""

from __future__ import annotations

WAIT_NOTICE_S = 5.0
"""Seconds between two lines of one wait's notice."""
