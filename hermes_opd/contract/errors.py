"""The project's exception hierarchy: every error hermes-opd raises derives from `HermesOPDError`,
with a stdlib mix-in where callers expect one (`ValueError`, `TimeoutError`, `RuntimeError`, ...)."""

from __future__ import annotations


class HermesOPDError(Exception):
    """Base of every error raised by hermes-opd."""


class ConfigError(HermesOPDError, ValueError):
    """A configuration is invalid: a bad value, an unknown key, a file that cannot be read."""
