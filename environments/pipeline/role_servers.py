"""Which server serves which role (policy, judge, teacher), and a startup check of each: the ONE
place that works this out. The env builds a `RoleServers` once, at setup; its pipeline (teacher
client, judge factory), its setup check and `hermes-opd process`'s preflight all read that value.

The judge and the teacher fall back to the FIRST policy server when their own endpoint is not set
(URL, model name and key; the judge keeps its own key when it has one). `resolve_role_servers`
(pure) says which server each role gets and why; `describe_role_servers` (pure) turns that into the
one log line the env prints at setup; `check_role_servers` (I/O, through `hermes_opd.vllm_api.http`)
asks each distinct URL for its model list once, before any other request, so that a server that is
down or serves another model name fails with an error that names the role and the setting to fix:

- nothing answers: `ServerUnreachableError`;
- `/models` answers, without the configured model: `ModelNotServedError`;
- `/models` answers with an error status (a hosted API without that route, a missing key): a
  warning; the first real request will tell;
- `min_model_len` given (the preflight) and the model's `max_model_len` is shorter: `ContextTooShortError`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from hermes_opd.vllm_api import http
from hermes_opd.vllm_api.endpoint import Endpoint
from hermes_opd.vllm_api.errors import (
    ContextTooShortError,
    ModelNotServedError,
    ServerUnreachableError,
    TransientServerError,
)

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

    @property
    def endpoint(self) -> Endpoint | None:
        """Where this role's requests go; None for a role without a server."""
        if self.base_url is None or self.model is None:
            return None
        return Endpoint(self.base_url, self.model, self.api_key)


@dataclass(frozen=True)
class RoleServers:
    """The resolved server of every role. Iterating gives the policy servers, the judge, the teacher."""

    policy: tuple[RoleServer, ...]
    judge: RoleServer
    teacher: RoleServer

    def __iter__(self) -> Iterator[RoleServer]:
        yield from self.policy
        yield self.judge
        yield self.teacher


def _policy_label(index: int, count: int) -> str:
    return "policy" if count == 1 else f"policy {index}"


def resolve_role_servers(config: Any, policy_servers: list[Any], opd: Any = None) -> RoleServers:
    """The server of each role, from an `AgenticOPDConfig` and the policy `APIServerConfig`s: the
    judge (`llm` backend) and the teacher use their own `*_base_url`/`*_model` where set, else the
    first policy server's. `opd`: the config's nested `OPDConfig` when the caller already has it."""
    count = len(policy_servers)
    policy = tuple(
        RoleServer(_policy_label(i, count), s.base_url, s.model_name, s.api_key,
                   url_setting="openai.base_url" if count == 1 else f"openai[{i}].base_url",
                   model_setting="openai.model_name" if count == 1 else f"openai[{i}].model_name")
        for i, s in enumerate(policy_servers)
    )  # fmt: skip
    first = policy_servers[0] if policy_servers else None
    if not config.opd_enabled:
        unused = "not used (opd_enabled is false)"
        return RoleServers(policy, RoleServer("judge", None, None, note=unused),
                           RoleServer("teacher", None, None, note=unused))  # fmt: skip
    opd = opd if opd is not None else config.opd_config()
    judge_config = opd.judge
    if judge_config.backend != "llm":
        judge = RoleServer("judge", None, None, note=f"{judge_config.backend} backend, offline (no server)")
    else:
        own_key = judge_config.api_key or judge_config.api_key_env
        key = judge_config.resolved_api_key()
        if judge_config.base_url is None and not own_key and first is not None and first.api_key:
            key = first.api_key
        judge = _with_fallback("judge", judge_config.base_url, judge_config.model, key, first, count,
                               "env.judge_base_url", "env.judge_model")  # fmt: skip
    teacher_config = opd.teacher
    teacher = _with_fallback("teacher", teacher_config.base_url, teacher_config.model, teacher_config.api_key,
                             first, count, "env.teacher_base_url", "env.teacher_model")  # fmt: skip
    return RoleServers(policy, judge, teacher)


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


def describe_role_servers(roles: RoleServers) -> str:
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
Listing = tuple[list[str], dict[str, int]]
"""Model ids served at a URL, and the `max_model_len` of those that say it."""


async def _list_models(url: str, api_key: str | None, timeout_s: float) -> Listing | str:
    """What `url` serves, or a string saying why the listing is not usable. Raises
    `ServerUnreachableError`/`TransientServerError` when nothing answers."""
    where = f"GET {url}/models"
    answer = await http.request("GET", f"{url}/models", api_key=api_key, timeout_s=timeout_s,
                                connect_timeout_s=min(CONNECT_TIMEOUT_S, timeout_s))  # fmt: skip
    if answer.status != 200:
        return f"{where} answered {answer.status}"
    try:
        body = answer.json()
    except ValueError:
        return f"{where} did not answer JSON"
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        return f"{where} has no model list"
    models = [m for m in data if isinstance(m, dict)]
    lengths = {str(m.get("id")): int(m["max_model_len"]) for m in models if m.get("max_model_len")}
    return [str(m.get("id")) for m in models], lengths


def _roles_text(roles: list[RoleServer]) -> str:
    names = [r.role for r in roles]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


async def check_role_servers(
    roles: RoleServers,
    timeout_s: float = CHECK_TIMEOUT_S,
    min_model_len: dict[str, int] | None = None,
) -> list[str]:
    """Ask every distinct URL of `roles` for `/models` (concurrently, once each), then check each role
    in order (policy, judge, teacher). Raises `ServerUnreachableError`/`ModelNotServedError` (and,
    for a role named in `min_model_len`, `ContextTooShortError`) for the first role that fails;
    returns warnings for listings that could not be read."""
    by_url: dict[str, list[RoleServer]] = {}
    for r in roles:
        if r.base_url:
            by_url.setdefault(r.base_url.rstrip("/"), []).append(r)
    urls = list(by_url)
    answers = await asyncio.gather(
        *(_list_models(url, by_url[url][0].api_key, timeout_s) for url in urls), return_exceptions=True
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
            if not isinstance(answer, ServerUnreachableError | TransientServerError):
                raise answer
            why = "no answer" if isinstance(answer.__cause__, TimeoutError) else str(answer)
            also = [x for x in sharing if x is not r]
            shared = f" (also the {_roles_text(also)} server)" if also else ""
            raise ServerUnreachableError(
                f"the {r.role} server at {r.base_url}{shared} is unreachable ({why}); start it, or fix "
                f"{r.url_setting}"
            )
        if isinstance(answer, str):
            warnings.append(f"{r.role} server: {answer}; model name not checked")
            continue
        served, lengths = answer
        if served and r.model not in served:
            raise ModelNotServedError(
                f"the {r.role} server at {r.base_url} does not serve model {r.model!r}; it serves {served}. "
                f"Set {r.model_setting} to one of those (or start vLLM with --served-model-name {r.model})"
            )
        needed = (min_model_len or {}).get(r.role.split(" ")[0], 0)
        if needed and lengths.get(str(r.model), needed) < needed:
            raise ContextTooShortError(
                f"the {r.role} server at {r.base_url} serves {r.model!r} with max_model_len="
                f"{lengths[str(r.model)]}, but the run needs about {needed}; restart vLLM with --max-model-len "
                f"{needed + 256} or lower env.max_token_length"
            )
    for warning in dict.fromkeys(warnings):
        logger.warning("%s", warning)
    return list(dict.fromkeys(warnings))
