"""One model server endpoint (base URL, model name, key) and the one rule for its key: `None`, the
empty string, `EMPTY` and `x` (what vLLM examples and the OpenAI SDK use for "no key") send no
`Authorization` header."""

from __future__ import annotations

from dataclasses import dataclass

NO_KEY_VALUES = frozenset({"", "EMPTY", "x"})


def has_key(api_key: str | None) -> bool:
    """True when `api_key` is a real key (not None, '', 'EMPTY' or 'x')."""
    return api_key is not None and api_key not in NO_KEY_VALUES


def auth_headers(api_key: str | None) -> dict[str, str]:
    """`{"Authorization": "Bearer <key>"}` for a real key, else `{}`."""
    return {"Authorization": f"Bearer {api_key}"} if has_key(api_key) else {}


@dataclass(frozen=True)
class Endpoint:
    """Where one role's requests go: an OpenAI-compatible base URL (…/v1), a model name, a key."""

    base_url: str
    model: str
    api_key: str | None = None
