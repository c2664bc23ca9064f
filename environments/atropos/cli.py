"""`python -m environments.atropos.agentic_opd_env serve|process|evaluate ...`: atroposlib's own CLI, with the
errors of `hermes-opd process`.

atroposlib builds the three subcommands (`BaseEnv.get_cli_*_config_cls`) and runs them with
pydantic-cli. We keep that, and add:

- a config check before atroposlib reads anything, with the loader of `hermes-opd process`
  (`environments.atropos.config_loading`): bad YAML, a bad value, an unknown key or flag (with the closest
  valid name) is one line on stderr and exit code 2, instead of a traceback or a silently ignored key;
- one line and exit code 2 for the errors a user fixes in the config or the server: unreachable
  server, wrong model name, too low `--max-logprobs`, a teacher with another tokenizer, a task file
  that cannot be read; anything else keeps its traceback (it is a bug);
- Ctrl-C: exit 130, SIGTERM: exit 143, each after the env's sessions are closed
  (`environments.atropos.cli_lifecycle`);
- `evaluate`: no groups file (BaseEnv would create an empty one), atroposlib's config dump moved
  to the debug log, and the short table of `environments.atropos.eval_report` on stdout;
- log lines of this project at INFO on stderr (`HERMES_OPD_LOG_LEVEL` changes it); atroposlib's
  own show only from WARNING up, as before (its serve loop logs its status ten times a second).

It must not import `environments.atropos.agentic_opd_env`: run as `-m`, that module is `__main__`, and a
second import would build a second env class.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import difflib
import io
import logging
import os
import sys
import warnings
from typing import Any

from hermes_opd.contract.log_setup import configure_logging
from hermes_opd.runtime.exit_codes import EXIT_SIGINT, EXIT_SIGTERM, EXIT_USAGE

logger = logging.getLogger(__name__)

MODES = ("serve", "process", "evaluate")
STOPPED_BY = {"SIGINT": ("interrupted", EXIT_SIGINT), "SIGTERM": ("stopped by SIGTERM", EXIT_SIGTERM)}
"""What the CLI prints, and its exit code, when that signal stopped the run."""
OUR_LOGGERS = ("__main__", "environments", "hermes_opd", "judge", "scoring", "trainer_adapters")
"""`__main__`: the env module itself, run with `-m`."""


def one_line(text: object) -> str:
    return " ".join(str(text).split())


# -- the config check -----------------------------------------------------------------------------
def _known_flags(command_cls: Any) -> list[str]:
    return sorted(command_cls.model_fields)


def check_command_line(env_cls: Any, argv: list[str], command_cls: Any) -> None:
    """Raise `ConfigError` for what atroposlib's CLI would trip over or silently ignore in `argv`
    (the arguments after the subcommand): the YAML, every `--env.*`/`--openai.*` key and value
    (the `hermes-opd process` loader, which names the closest valid key), and other unknown flags."""
    from environments.atropos.config_loading import load_job_config, read_yaml, split_overrides
    from hermes_opd.contract.errors import ConfigError

    argv = ["null" if a == "None" else a for a in argv]  # atroposlib reads the flag value None as null
    overrides, rest = split_overrides(argv)
    if any(index is not None for index in overrides.openai):
        raise ConfigError(
            "--openai.N.KEY is a `hermes-opd process` flag; Atropos' CLI takes the settings of several "
            "servers from the YAML list under 'openai' only"
        )
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--config", default=None)
    known, leftover = parser.parse_known_args(rest)
    listed = read_yaml(known.config).get("openai") if known.config else None
    if overrides.openai and isinstance(listed, list) and len(listed) > 1:
        flag = next(iter(overrides.openai[None]))
        raise ConfigError(
            f"--openai.{flag}: {known.config} lists {len(listed)} servers under 'openai', and Atropos' CLI "
            "takes no --openai.* flag then; change the YAML list (or use `hermes-opd process --openai.N.KEY`)"
        )
    fields = _known_flags(command_cls)
    for arg in leftover:
        if not arg.startswith("--") or arg in ("--help", "-h"):
            continue
        name = arg[2:].split("=", 1)[0]
        if name not in fields:
            close = difflib.get_close_matches(name, fields, n=1)
            hint = f"; did you mean --{close[0]}?" if close else ""
            raise ConfigError(f"unknown flag --{name}{hint}")
    load_job_config(known.config, overrides, env_cls=env_cls)


# -- per-command classes ------------------------------------------------------------------------
def cli_env_class(env_cls: Any, mode: str) -> type:
    """A subclass of `env_cls` for one subcommand (`cli_mode` set). For `evaluate` it opens no groups
    file: the metrics path is fixed first (it defaults to the groups file's folder), then
    `data_path_to_save_groups` is cleared, so BaseEnv creates no (empty) groups file."""
    attrs: dict[str, Any] = {"cli_mode": mode, "__module__": env_cls.__module__, "__doc__": env_cls.__doc__}
    if mode == "evaluate":

        def __init__(self, config, server_configs, slurm: bool = False, testing: bool = False):
            config = config.model_copy()
            if not config.metrics_path:
                config.metrics_path = str(env_cls.metrics_path_for(config))
            config.data_path_to_save_groups = None
            env_cls.__init__(self, config, server_configs, slurm, testing)

        attrs["__init__"] = __init__
    sub = type(env_cls.__name__, (env_cls,), attrs)
    sub.__qualname__ = env_cls.__qualname__
    return sub


def command_classes(env_cls: Any) -> tuple[dict[str, type], dict[str, type]]:
    """atroposlib's serve/process/evaluate command classes, built for the per-command env classes
    (returned second, by mode)."""
    envs = {mode: cli_env_class(env_cls, mode) for mode in MODES}
    commands = {
        "serve": envs["serve"].get_cli_serve_config_cls(),
        "process": envs["process"].get_cli_process_config_cls(),
    }
    evaluate_env = envs["evaluate"]
    base = evaluate_env.get_cli_evaluate_config_cls()

    class EvaluateCommand(base):  # type: ignore[misc, valid-type]
        __doc__ = base.__doc__

        def run(self) -> None:
            evaluate_env.report_stream = sys.stdout
            captured = io.StringIO()
            try:
                with contextlib.redirect_stdout(captured):
                    super().run()
            finally:
                if captured.getvalue().strip():
                    logger.debug("atroposlib's evaluate printed:\n%s", captured.getvalue().rstrip())

    commands["evaluate"] = EvaluateCommand
    return commands, envs


# -- errors -------------------------------------------------------------------------------------
def _is_one_line_error(exc: BaseException) -> bool:
    from environments.atropos.user_errors import one_line_errors

    return isinstance(exc, one_line_errors())


def _error_handler(prefix: str):
    from pydantic_cli import FailedExecutionException

    def handle(exc: Exception) -> int:
        if isinstance(exc, FailedExecutionException):
            # argparse has printed its usage already; this is its message (or atroposlib's).
            print(f"{prefix}: {one_line(exc.message.split('error: ')[-1])}", file=sys.stderr)
            return exc.exit_code if isinstance(exc.exit_code, int) and exc.exit_code else EXIT_USAGE
        if _is_one_line_error(exc):
            from environments.atropos.user_errors import config_errors

            kind = "config error" if isinstance(exc, config_errors()) else type(exc).__name__
            print(f"{prefix}: {kind}: {one_line(exc)}", file=sys.stderr)
            logger.debug("details", exc_info=exc)
            return EXIT_USAGE
        raise exc

    return handle


def run_cli(env_cls: Any, argv: list[str] | None = None) -> int:
    """Run atroposlib's CLI for `env_cls` on `argv` (default: sys.argv[1:]); return the exit code.

    atroposlib's commands read the flags from `sys.argv` themselves, so `argv` must be the same."""
    from pydantic_cli import to_runner

    from hermes_opd.contract.errors import ConfigError

    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[0] if argv and argv[0] in MODES else None
    prefix = f"{env_cls.name or env_cls.__name__}{' ' + command if command else ''}"
    # This project's lines at INFO; atroposlib's loggers are left as they are (only their warnings
    # show: its serve loop logs its status at INFO ten times a second). A caller's set-up wins.
    configure_logging(os.environ.get("HERMES_OPD_LOG_LEVEL", "INFO"), loggers=OUR_LOGGERS)
    # Every config here points at a local server; atroposlib warns about that on each run.
    warnings.filterwarnings("ignore", message="You are using a local Base URL", category=UserWarning)
    commands, envs = command_classes(env_cls)
    if command is not None and not {"--help", "-h"} & set(argv):
        try:
            check_command_line(env_cls, argv[1:], commands[command])
        except ConfigError as exc:
            print(f"{prefix}: config error: {one_line(exc)}", file=sys.stderr)
            return EXIT_USAGE
    runner = to_runner(
        commands, description=f"CLI for {env_cls.__name__}", exception_handler=_error_handler(prefix)
    )
    try:
        return runner(argv)
    except KeyboardInterrupt:
        return _stopped(prefix, "SIGINT")
    except asyncio.CancelledError:
        stopped_by = envs[command].stopped_by if command is not None else None
        if stopped_by in STOPPED_BY:
            return _stopped(prefix, stopped_by)
        raise


def _stopped(prefix: str, signal_name: str) -> int:
    what, code = STOPPED_BY[signal_name]
    print(f"{prefix}: {what} (the env's connections are closed)", file=sys.stderr)
    return code
