"""Which server serves which role (policy, judge, teacher), and a startup check of each.

The judge and the teacher fall back to the FIRST policy server when their own endpoint is not set.
`resolve_role_servers` (pure) says which server each role gets and why; `describe_role_servers`
(pure) turns that into the one log line the env prints at setup; `check_role_servers` (I/O) asks
each distinct URL for its model list once, before any other request, so that a server that is down
or serves another model name fails with an error that names the role and the setting to fix:

- nothing answers: `ServerUnreachableError`;
- `/models` answers, without the configured model: `ModelNotServedError`;
- `/models` answers with an error status (a hosted API without that route, a missing key): a
  warning; the first real request will tell.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

import aiohttp

from hermes_opd.vllm_api.errors import ModelNotServedError, ServerUnreachableError

logger = logging.getLogger(__name__)

CHECK_TIMEOUT_S = 30.0
"""Total time one `/models` request may take (a busy CPU vLLM can be slow to answer)."""
CONNECT_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class RoleServer:
    """The endpoint one role uses. `base_url` is None for a role that needs no server (rules judge)."""

    role: str
    """'policy', 'policy 1', ..., 'judge' or 'teacher'."""
    base_url: str | None
    model: str | None
    api_key: str | None = None
    fallback: str | None = None
    """Why this role uses the policy server (e.g. 'teacher_base_url is not set'); None: its own setting."""
    url_setting: str = "openai.base_url"
    model_setting: str = "openai.model_name"
    note: str | None = None
    """Set instead of `base_url` when no server is used, saying why (shown in the log line)."""


def _policy_label(index: int, count: int) -> str:
    return "policy" if count == 1 else f"policy {index}"


def resolve_role_servers(config: Any, policy_servers: list[Any]) -> list[RoleServer]:
    """The server of each role, from an `AgenticOPDConfig` and the policy `APIServerConfig`s.

    Mirrors what the env builds: the judge (`llm` backend) and the teacher use their own
    `*_base_url`/`*_model` where set, else the first policy server's."""
    count = len(policy_servers)
    roles = [
        RoleServer(_policy_label(i, count), s.base_url, s.model_name, s.api_key,
                   url_setting="openai.base_url" if count == 1 else f"openai[{i}].base_url",
                   model_setting="openai.model_name" if count == 1 else f"openai[{i}].model_name")
        for i, s in enumerate(policy_servers)
    ]  # fmt: skip
    first = policy_servers[0] if policy_servers else None
    if not config.opd_enabled:
        roles.append(RoleServer("judge", None, None, note="not used (opd_enabled is false)"))
        roles.append(RoleServer("teacher", None, None, note="not used (opd_enabled is false)"))
        return roles
    opd = config.opd_config()
    judge = opd.judge
    if judge.backend != "llm":
        roles.append(RoleServer("judge", None, None, note=f"{judge.backend} backend, offline (no server)"))
    else:
        own_key = judge.api_key or judge.api_key_env
        key = judge.resolved_api_key()
        if judge.base_url is None and not own_key and first is not None and first.api_key:
            key = first.api_key
        roles.append(_with_fallback("judge", judge.base_url, judge.model, key, first, count,
                                    "env.judge_base_url", "env.judge_model"))  # fmt: skip
    teacher = opd.teacher
    roles.append(_with_fallback("teacher", teacher.base_url, teacher.model, teacher.api_key, first, count,
                                "env.teacher_base_url", "env.teacher_model"))  # fmt: skip
    return roles


def _with_fallback(role, base_url, model, api_key, first, count, url_setting, model_setting) -> RoleServer:
    """A role's own endpoint where set, else the first policy server's (URL, model name, key)."""
    if first is None:
        return RoleServer(
            role, base_url, model, api_key, url_setting=url_setting, model_setting=model_setting
        )
    which = "the policy server" if count == 1 else f"the first of the {count} policy servers"
    url_name, model_name = url_setting.removeprefix("env."), model_setting.removeprefix("env.")
    fallback = None
    if base_url is None:
        fallback = f"{which} ({url_name} is not set)"
    elif model is None:
        fallback = f"the model name of {which} ({model_name} is not set)"
    return RoleServer(
        role,
        base_url or first.base_url,
        model or first.model_name,
        api_key or first.api_key,
        fallback=fallback,
        url_setting=url_setting if base_url is not None else "openai.base_url",
        model_setting=model_setting if model is not None else "openai.model_name",
    )


def describe_role_servers(roles: list[RoleServer]) -> str:
    """One line: which server serves which role, and which roles fall back to the policy server."""
    parts = []
    for r in roles:
        if r.base_url is None:
            parts.append(f"{r.role}: {r.note or 'no server'}")
            continue
        text = f"{r.role}: {r.base_url} ({r.model})"
        if r.fallback:
            text += f", falls back to {r.fallback}"
        parts.append(text)
    return "servers by role: " + "; ".join(parts)


# -- the check (I/O) ------------------------------------------------------------------------------
async def _list_models(session: aiohttp.ClientSession, url: str, api_key: str | None) -> list[str] | str:
    """Model ids served at `url`, or a string saying why the listing is not usable. Raises
    `aiohttp.ClientConnectionError`/`TimeoutError` when nothing answers."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key and api_key not in ("EMPTY", "x") else {}
    async with session.get(f"{url.rstrip('/')}/models", headers=headers) as response:
        if response.status != 200:
            return f"GET {url.rstrip('/')}/models answered {response.status}"
        try:
            body = await response.json(content_type=None)
        except ValueError:
            return f"GET {url.rstrip('/')}/models did not answer JSON"
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        return f"GET {url.rstrip('/')}/models has no model list"
    return [str(m.get("id")) for m in data if isinstance(m, dict)]


def _roles_text(roles: list[RoleServer]) -> str:
    names = [r.role for r in roles]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


async def check_role_servers(roles: list[RoleServer], timeout_s: float = CHECK_TIMEOUT_S) -> list[str]:
    """Ask every distinct URL of `roles` for `/models` (concurrently, once each), then check each role
    in order (policy, judge, teacher). Raises `ServerUnreachableError`/`ModelNotServedError` for the
    first role that fails; returns warnings for listings that could not be read."""
    by_url: dict[str, list[RoleServer]] = {}
    for r in roles:
        if r.base_url:
            by_url.setdefault(r.base_url.rstrip("/"), []).append(r)
    timeout = aiohttp.ClientTimeout(total=timeout_s, connect=min(CONNECT_TIMEOUT_S, timeout_s))
    async with aiohttp.ClientSession(timeout=timeout) as session:
        urls = list(by_url)
        answers = await asyncio.gather(
            *(_list_models(session, url, by_url[url][0].api_key) for url in urls), return_exceptions=True
        )
    listing = dict(zip(urls, answers, strict=True))
    warnings: list[str] = []
    for r in roles:
        if not r.base_url:
            continue
        url = r.base_url.rstrip("/")
        answer = listing[url]
        sharing = by_url[url]
        if isinstance(answer, BaseException):
            if not isinstance(answer, aiohttp.ClientError | TimeoutError | OSError):
                raise answer
            why = "no answer" if isinstance(answer, TimeoutError) else f"{type(answer).__name__}: {answer}"
            also = [x for x in sharing if x is not r]
            shared = f" (also the {_roles_text(also)} server)" if also else ""
            raise ServerUnreachableError(
                f"the {r.role} server at {r.base_url}{shared} is unreachable ({why}); start it, or fix "
                f"{r.url_setting}"
            )
        if isinstance(answer, str):
            warnings.append(f"{r.role} server: {answer}; model name not checked")
            continue
        if answer and r.model not in answer:
            raise ModelNotServedError(
                f"the {r.role} server at {r.base_url} does not serve model {r.model!r}; it serves {answer}. "
                f"Set {r.model_setting} to one of those (or start vLLM with --served-model-name {r.model})"
            )
    for warning in dict.fromkeys(warnings):
        logger.warning("%s", warning)
    return list(dict.fromkeys(warnings))
