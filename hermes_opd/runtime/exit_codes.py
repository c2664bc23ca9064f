"""The exit codes of every command (`hermes-opd ...` and the env's CLI), defined once."""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1
"""The run failed (or is incomplete): a rerun may finish it."""
EXIT_USAGE = 2
"""Bad input: a flag, a config, a file; nothing a rerun fixes."""
EXIT_SIGINT = 130
"""Stopped by Ctrl-C (128 + SIGINT)."""
EXIT_SIGTERM = 143
"""Stopped by SIGTERM (128 + SIGTERM)."""
