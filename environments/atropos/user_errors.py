"""Which errors a user fixes in the config or the server, told apart by type (not by class name).

- `config_errors()`: a bad config (`ConfigError`, pydantic's `ValidationError`);
- `permanent_errors()`: a server that can never serve the job as configured (another model, too low
  `--max-logprobs`, a teacher with another tokenizer): retrying a group cannot help;
- `one_line_errors()`: every error whose message says what to change, printed as one line with exit
  code 2 by the env's CLI (environments/atropos/cli.py); `hermes-opd process` aborts on a permanent one.

The imports are lazy: the env's CLI checks a command line before it loads the teacher's scorer.
"""

from __future__ import annotations


def config_errors() -> tuple[type[BaseException], ...]:
    from pydantic import ValidationError

    from hermes_opd.contract.errors import ConfigError

    return (ConfigError, ValidationError)


def permanent_errors() -> tuple[type[BaseException], ...]:
    from hermes_opd.vllm_api.errors import MaxLogprobsTooLowError, ModelNotServedError
    from scoring.teacher import TeacherTokenizerMismatchError

    return (ModelNotServedError, MaxLogprobsTooLowError, TeacherTokenizerMismatchError)


def one_line_errors() -> tuple[type[BaseException], ...]:
    from environments.tasks.loaders import TaskLoadError
    from hermes_opd.vllm_api.errors import ServerUnreachableError

    return (*config_errors(), ServerUnreachableError, TaskLoadError, *permanent_errors())


def names_a_permanent_error(text: str) -> bool:
    """True when an error recorded as text (a rollout's `error` in its group's overrides, which holds
    `ClassName: message` only) was one of `permanent_errors()`."""
    return any(
        text.startswith(f"{cls.__name__}:") or f" {cls.__name__}:" in text for cls in permanent_errors()
    )
