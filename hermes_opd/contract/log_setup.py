"""The one logging set-up of every command: `hermes-opd` itself, its subcommands (`process`, `demo`,
`train`, `bench`) and the env's own CLI (`python -m environments.atropos.agentic_opd_env`).

It lives in the contract, the floor every command stands on, because `hermes-opd train`
(`trainer_adapters/`) may import nothing else of the project. What differs between the commands is
a parameter:

- `level`: INFO for `hermes-opd` (DEBUG with `-v`), WARNING for `process`, `demo` and the benches,
  the `--log-level` of `train`, `HERMES_OPD_LOG_LEVEL` for the env's CLI;
- `loggers`: the root logger (every library's lines), or only this project's loggers (the env's
  CLI: atroposlib's serve loop logs its status at INFO ten times a second);
- `override`: a command whose level must win even when logging is set up already (by `hermes-opd`,
  which runs the subcommand in the same process): `process` turns INFO chatter off again.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
"""One log line: time, level, logger, message."""
ROOT = ""
"""The root logger's name for `loggers`: every logger's lines."""


def configure_logging(
    level: int | str,
    *,
    loggers: Sequence[str] = (ROOT,),
    override: bool = False,
    fmt: str = LOG_FORMAT,
) -> None:
    """Log lines of `loggers` at `level` and up on stderr, one handler, in `fmt`.

    If the root logger has a handler already (the caller, `hermes-opd` or a test set logging up),
    nothing is added: without `override` nothing changes at all; with it, the root logger and its
    handlers take `level`. With `override`, the level is also set on the handler, so that it filters
    the lines of libraries that set their own loggers lower (atroposlib sets DEBUG)."""
    if isinstance(level, str):
        level = level.upper()
    root = logging.getLogger()
    if root.handlers:
        if override:
            root.setLevel(level)
            for handler in root.handlers:
                handler.setLevel(level)
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter(fmt))
    if override:
        handler.setLevel(level)
    for name in loggers:
        logger = logging.getLogger(name)
        logger.addHandler(handler)
        logger.setLevel(level)
