"""Which server serves which role (policy, hint judge, teacher, process-reward judge), and a startup
check of each: the ONE place that works this out, for both producers of groups. The env
(environments/atropos/agentic_opd_env.py) and the proxy (environments/proxy/build.py) each build a
`RoleServers` once, with `resolve_roles`, from the same `OPDConfig`; their pipelines, the env's
setup check and `hermes-opd process`'s preflight all read that value. The rule (docs/roles.md):

- a role with its own `base_url` uses it, with its own key (or none);
- a role without one uses the server of its fallback: the teacher and the hint judge fall back to
  the (first) policy server, the process-reward judge to the hint judge's server when the hint judge
  is an `llm` judge, else to the policy server. It takes that server's URL and key, unless it sets a
  key of its own;
- a role without its own `model` takes the model name of the server it falls back to (a role with
  its own URL and no model: the policy's model name);
- a judge whose backend is not `llm` needs no server.

`resolve_roles` (pure) says which server each role gets and why; `describe_role_servers` (pure)
turns that into the one log line printed at setup; `follow_live_adapter` points a teacher that is
the policy itself at the adapter being served; `check_role_servers` (I/O, through
`hermes_opd.vllm_api.http`) asks each distinct URL for its model list once, before any other
request, so that a server that is down or serves another model name fails with an error that names
the role and the setting to fix:

- nothing answers: `ServerUnreachableError`;
- `/models` answers, without the configured model: `ModelNotServedError`;
- `/models` answers with an error status (a hosted API without that route, a missing key): a
  warning; the first real request will tell;
- `min_model_len` given (the preflight) and the model's `max_model_len` is shorter: `ContextTooShortError`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from environments.pipeline.opd_config import OPDConfig
from hermes_opd.vllm_api import http
from hermes_opd.vllm_api.endpoint import Endpoint, has_key
from hermes_opd.vllm_api.errors import (
    ContextTooShortError,
    ModelNotServedError,
    ServerUnreachableError,
    TransientServerError,
)
from judge.config import JudgeConfig

logger = logging.getLogger(__name__)

CHECK_TIMEOUT_S = 30.0
"""Total time one `/models` request may take (a busy CPU vLLM can be slow to answer)."""
CONNECT_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class RoleServer:
    """The endpoint one role uses. `base_url` is None for a role that needs no server (rules judge)."""

    role: str
    """'policy', 'policy 1', ..., 'judge', 'teacher' or 'prm judge'."""
    base_url: str | None
    model: str | None
    api_key: str | None = None
    fallback: str | None = None
    """Why this role uses another role's server (e.g. 'the policy server (teacher_base_url is not
    set)'); None: its own setting."""
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
    """The resolved server of every role. Iterating gives the policy servers, the judge, the
    teacher, and the process-reward judge when it is on."""

    policy: tuple[RoleServer, ...]
    judge: RoleServer
    teacher: RoleServer
    prm_judge: RoleServer | None = None
    """None while the process reward is off."""
    teacher_is_policy: bool = False
    """The teacher sets neither its own URL nor its own model: it is the policy (plus the hint), and
    scores with the adapter the policy server serves (`follow_live_adapter`)."""

    @property
    def prm_judge_endpoint(self) -> Endpoint | None:
        """The process-reward judge's endpoint; None while it is off or needs no server."""
        return self.prm_judge.endpoint if self.prm_judge is not None else None

    def __iter__(self) -> Iterator[RoleServer]:
        yield from self.policy
        yield self.judge
        yield self.teacher
        if self.prm_judge is not None:
            yield self.prm_judge


@dataclass(frozen=True)
class SettingNames:
    """How a producer spells the settings a role's error or fallback names."""

    opd_enabled: str
    judge: str
    teacher: str
    prm_judge: str
    """Prefixes: `judge + "base_url"` is the hint judge's URL setting, and so on."""


ENV_SETTINGS = SettingNames("opd_enabled", "env.judge_", "env.teacher_", "env.prm_judge_")
"""The env's flat `--env.*` names (environments/atropos/agentic_opd_config.py)."""
PROXY_SETTINGS = SettingNames("opd.enabled", "opd.judge.", "opd.teacher.", "opd.prm.judge.")
"""The proxy's nested names (environments/proxy/proxy_config.py)."""


def policy_role_servers(servers: Sequence[Any]) -> tuple[RoleServer, ...]:
    """The policy roles of Atropos `APIServerConfig`s (`base_url`, `model_name`, `api_key`)."""
    count = len(servers)
    return tuple(
        RoleServer(
            "policy" if count == 1 else f"policy {i}",
            s.base_url,
            s.model_name,
            s.api_key,
            url_setting="openai.base_url" if count == 1 else f"openai[{i}].base_url",
            model_setting="openai.model_name" if count == 1 else f"openai[{i}].model_name",
        )
        for i, s in enumerate(servers)
    )


def resolve_roles(
    opd: OPDConfig, policy: Sequence[RoleServer], names: SettingNames = ENV_SETTINGS
) -> RoleServers:
    """The server of each role for the pipeline `opd` describes, given the policy servers (the
    rule is in this module's docstring). Pure."""
    policy = tuple(policy)
    first = policy[0] if policy else None
    which = "the policy server" if len(policy) == 1 else f"the first of the {len(policy)} policy servers"
    hint_judge = _judge_role("judge", opd.judge, first, which, names.judge)
    if not opd.enabled:
        unused = f"not used ({names.opd_enabled} is false)"
        judge = RoleServer("judge", None, None, note=unused)
        teacher = RoleServer("teacher", None, None, note=unused)
    else:
        judge = hint_judge
        teacher = _own_or_fallback(
            "teacher",
            opd.teacher.base_url,
            opd.teacher.model,
            opd.teacher.resolved_api_key(),
            first,
            which,
            names.teacher,
        )
    prm_judge = None
    if opd.prm.enabled:
        follows = hint_judge if hint_judge.base_url is not None else first
        prm_judge = _judge_role(
            "prm judge",
            opd.prm.judge,
            follows,
            "the hint judge's server" if follows is hint_judge else which,
            names.prm_judge,
        )
    teacher_is_policy = opd.enabled and opd.teacher.base_url is None and opd.teacher.model is None
    return RoleServers(policy, judge, teacher, prm_judge, teacher_is_policy)


def _judge_role(
    role: str, config: JudgeConfig, fallback: RoleServer | None, which: str, prefix: str
) -> RoleServer:
    if config.backend != "llm":
        return RoleServer(role, None, None, note=f"{config.backend} backend, offline (no server)")
    key = config.resolved_api_key()
    return _own_or_fallback(
        role, config.base_url, config.model, key if has_key(key) else None, fallback, which, prefix
    )


def _own_or_fallback(
    role: str,
    base_url: str | None,
    model: str | None,
    own_key: str | None,
    fallback: RoleServer | None,
    which: str,
    prefix: str,
) -> RoleServer:
    """A role's own endpoint where set, else its fallback's URL and key; its own model, else the
    fallback's model name."""
    url_setting, model_setting = prefix + "base_url", prefix + "model"
    if fallback is None:
        return RoleServer(
            role, base_url, model, own_key, url_setting=url_setting, model_setting=model_setting
        )
    url_name, model_name = url_setting.removeprefix("env."), model_setting.removeprefix("env.")
    why = None
    if base_url is None:
        why = f"{which} ({url_name} is not set)"
    elif model is None:
        why = f"the model name of {which} ({model_name} is not set)"
    own_url = base_url is not None
    return RoleServer(
        role,
        base_url if own_url else fallback.base_url,
        model or fallback.model,
        own_key if own_url or own_key else fallback.api_key,
        fallback=why,
        url_setting=url_setting if own_url else fallback.url_setting,
        model_setting=model_setting if model is not None else fallback.model_setting,
    )


def resolve_role_servers(
    config: Any, policy_servers: Sequence[Any], opd: OPDConfig | None = None
) -> RoleServers:
    """The env's roles: `resolve_roles` over an `AgenticOPDConfig` and its policy `APIServerConfig`s.
    `opd`: the config's nested `OPDConfig` when the caller already has it."""
    opd = opd if opd is not None else config.opd_config()
    return resolve_roles(opd, policy_role_servers(policy_servers), ENV_SETTINGS)


def follow_live_adapter(pipeline: Any, roles: RoleServers, model: str) -> None:
    """Point the teacher at `model`, the adapter the policy server serves now, when the teacher is
    the policy (`roles.teacher_is_policy`); a teacher of its own keeps its model. `pipeline`: an
    `OPDPipeline` or None."""
    teacher = getattr(pipeline, "teacher", None)  # PRM alone has no teacher
    if roles.teacher_is_policy and teacher is not None:
        teacher.client.model = model


def describe_role_servers(roles: RoleServers) -> str:
    """One line: which server serves which role, and which roles fall back to another's server."""
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
    answer = await http.request(
        "GET",
        f"{url}/models",
        api_key=api_key,
        timeout_s=timeout_s,
        connect_timeout_s=min(CONNECT_TIMEOUT_S, timeout_s),
    )
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
