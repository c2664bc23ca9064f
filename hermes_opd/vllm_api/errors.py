"""Errors raised when talking to a vLLM server, each saying what to do about it."""

from __future__ import annotations

from hermes_opd.contract.errors import HermesOPDError


class VLLMError(HermesOPDError, RuntimeError):
    """Base class for vLLM client errors."""

    transient = False
    """True when retrying the same request may succeed."""


class ServerUnreachableError(VLLMError):
    """Nothing answers at the configured URL."""

    transient = True


class TransientServerError(VLLMError):
    """A 5xx, a timeout or a dropped connection: worth retrying."""

    transient = True


class MaxLogprobsTooLowError(VLLMError):
    """The server was started with a `--max-logprobs` below what the request needs."""


class ModelNotServedError(VLLMError):
    """The server does not serve the requested model name."""


class ContextTooShortError(VLLMError):
    """The server serves the model with a `max_model_len` below what the run needs."""


class BadRequestError(VLLMError):
    """The server rejected the request (4xx) for another reason."""


class UnexpectedResponseError(VLLMError):
    """The server answered 200 with a body whose shape we do not understand."""
