"""A `WireError` in Anthropic's error shape (pure logic):
`{"type": "error", "error": {"type": ..., "message": ...}}` with the error's HTTP status; the same
object is the data of an in-stream `error` event."""

from __future__ import annotations

from typing import Any

from environments.proxy.conversation import WireError

TYPES = {
    "invalid_request": "invalid_request_error",
    "authentication": "authentication_error",
    "permission": "permission_error",
    "not_found": "not_found_error",
    "method_not_allowed": "invalid_request_error",
    "too_large": "request_too_large",
    "timeout": "timeout_error",
    "overloaded": "overloaded_error",
    "upstream": "api_error",
}
"""Anthropic's error `type` per kind."""


def error_body(error: WireError) -> dict[str, Any]:
    return {"type": "error", "error": {"type": TYPES.get(error.kind, "api_error"), "message": error.message}}
