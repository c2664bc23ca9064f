"""Requests for the proxy session tests."""

from __future__ import annotations


def body(**extra):
    return {"model": "m", "messages": [{"role": "user", "content": "hi"}], **extra}
