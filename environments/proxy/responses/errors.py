"""A `WireError` in OpenAI's error shape (pure logic): `{"error": {"message", "type", "param",
"code"}}` with the error's HTTP status, and the `code` an in-stream `error` event carries."""

from __future__ import annotations

from typing import Any

from environments.proxy.conversation import WireError

TYPES = {
    "authentication": "authentication_error",
    "permission": "permission_error",
    "overloaded": "server_error",
    "upstream": "server_error",
}
"""OpenAI's error `type` per kind; every other kind is an `invalid_request_error`."""


def error_body(error: WireError) -> dict[str, Any]:
    return {
        "error": {
            "message": error.message,
            "type": TYPES.get(error.kind, "invalid_request_error"),
            "param": error.param,
            "code": error.code,
        }
    }


def stream_error_code(error: WireError) -> str:
    """The `code` of a failed response (OpenAI's `ResponseError.code` values)."""
    if error.kind == "overloaded":
        return "rate_limit_exceeded"
    if error.kind in ("invalid_request", "too_large"):
        return "invalid_prompt"
    return "server_error"
