"""Job configs: Atropos' YAML format plus `--env.KEY VALUE` / `--openai.KEY VALUE` overrides, turned
into an `AgenticOPDConfig` and a list of `APIServerConfig`s.

The YAML is the one `python -m environments.atropos.agentic_opd_env process --config FILE` reads:

```yaml
env:      {...}            # AgenticOPDConfig fields (BaseEnvConfig + the OPD knobs), and
  opd:    {...}            #   the OPD knobs nested as the proxy's `opd:` (OPDConfig's shape)
openai:   {...}            # one APIServerConfig, or a list of them (several policy servers)
slurm: false               # passed through (Atropos' ServerManager)
testing: false
process:  {concurrency: 2} # hermes-opd process only; Atropos' own CLI ignores this section
```

Precedence: command line > YAML > `AgenticOPDEnv.config_init()` defaults. Unlike Atropos' CLI, an
unknown key anywhere is an error (with the closest valid name), not silently ignored, and every
`openai` entry of a list is merged over the default server, like the single-server case.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, TypeAdapter, ValidationError

from hermes_opd.contract.errors import ConfigError
from hermes_opd.vllm_api.endpoint import has_key

TOP_LEVEL_KEYS = ("env", "openai", "slurm", "testing", "process")
PROCESS_KEYS = ("concurrency",)
OVERRIDE_NAMESPACES = ("env", "openai")


@dataclass
class JobConfig:
    """Everything a batch job needs to build `AgenticOPDEnv`."""

    env: Any
    """An `AgenticOPDConfig`."""
    servers: list[Any]
    """`APIServerConfig`s of the policy servers (Atropos load-balances over them)."""
    source: str = "<defaults>"
    concurrency: int = 1
    slurm: bool = False
    testing: bool = False
    raw: dict[str, Any] = field(default_factory=dict)
    """The merged YAML document (after overrides), for the record."""


# -- overrides ------------------------------------------------------------------------------------
@dataclass
class Overrides:
    """Parsed `--env.KEY VALUE` / `--openai[.N].KEY VALUE` flags (values still raw strings)."""

    env: dict[str, str] = field(default_factory=dict)
    openai: dict[int | None, dict[str, str]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.env or self.openai)


def split_overrides(argv: list[str]) -> tuple[Overrides, list[str]]:
    """Pull `--env.*` and `--openai.*` flags (`--k v` or `--k=v`) out of `argv`; return the rest.

    A flag with no value (followed by another `--flag` or nothing) means `true`."""
    overrides = Overrides()
    rest: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        namespace = arg[2:].split(".", 1)[0] if arg.startswith("--") and "." in arg else None
        if namespace not in OVERRIDE_NAMESPACES:
            rest.append(arg)
            i += 1
            continue
        key, eq, value = arg[2 + len(namespace) + 1 :].partition("=")
        if not eq:
            if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                value = argv[i + 1]
                i += 1
            else:
                value = "true"
        i += 1
        if not key:
            raise ConfigError(f"{arg}: missing the key after '--{namespace}.'")
        if namespace == "env":
            overrides.env[key] = value
            continue
        index: int | None = None
        head, dot, tail = key.partition(".")
        if dot and head.isdigit():
            index, key = int(head), tail
        overrides.openai.setdefault(index, {})[key] = value
    return overrides, rest


def _parse_value(raw: str, annotation: Any, name: str) -> Any:
    """The override string as YAML (numbers, booleans, null, lists), else as the plain string."""
    adapter = TypeAdapter(annotation)
    try:
        candidate = yaml.safe_load(raw)
    except (yaml.YAMLError, RecursionError):  # a value nested too deeply is taken as its text
        candidate = raw
    for value in (candidate, raw):
        try:
            return adapter.validate_python(value)
        except ValidationError as exc:
            error = exc
    first = error.errors()[0]
    raise ConfigError(f"--{name} {raw!r}: {first['msg']}")


# -- checks ---------------------------------------------------------------------------------------
def _unknown_key_message(where: str, key: str, known: list[str]) -> str:
    close = difflib.get_close_matches(key, known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"{where}: unknown key {key!r}{hint}"


def _check_keys(section: dict[str, Any], model: type[BaseModel], where: str) -> None:
    known = sorted(model.model_fields)
    for key in section:
        if key not in model.model_fields:
            raise ConfigError(_unknown_key_message(f"{where}.{key}", str(key), known))


def _check_one_spelling(env_section: dict[str, Any], nested_opd: Any, source: str) -> None:
    """Refuse a YAML `env:` that sets one knob both flat and nested (`opd:`), to different values."""
    from environments.atropos.agentic_opd_config import OPD_GROUPS
    from environments.pipeline.flat_fields import flatten_values

    if not isinstance(nested_opd, dict):
        raise ConfigError(
            f"{source}: env.opd must be a mapping shaped like OPDConfig (judge, teacher, prm, ...)"
        )
    try:
        flat = flatten_values(OPD_GROUPS, nested_opd)
    except ValueError as exc:
        raise ConfigError(f"{source}: env.{exc}") from exc
    for name, value in flat.items():
        if name in env_section and env_section[name] != value:
            raise ConfigError(
                f"{source}: env.{name} and its nested spelling in env.opd disagree; set it once"
            )


def _validation_message(exc: ValidationError, where: str) -> str:
    lines = []
    for error in exc.errors()[:5]:
        loc = ".".join(str(p) for p in error["loc"])
        value = error.get("input")
        shown = f" (got {value!r:.60})" if not isinstance(value, dict) else ""
        lines.append(f"{where}.{loc}: {error['msg']}{shown}")
    return "\n".join(lines)


def read_yaml(path: str | Path) -> dict[str, Any]:
    """The YAML document at `path` as a dict (empty file: `{}`), or ConfigError saying why not."""
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"config file {p} does not exist")
    if not p.is_file():
        raise ConfigError(f"config path {p} is not a file")
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{p}: not valid YAML{where}: {problem}") from exc
    except RecursionError:
        raise ConfigError(f"{p}: nested too deeply to read") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {p}: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"{p}: the top level must be a mapping with 'env:' and 'openai:', not {type(data).__name__}"
        )
    return data


# -- building -------------------------------------------------------------------------------------
def build_job_config(
    data: dict[str, Any], overrides: Overrides | None = None, source: str = "<config>", *, env_cls: Any
) -> JobConfig:
    """Merge `config_init()` defaults, the YAML document `data` and `overrides` into a JobConfig."""
    from atroposlib.envs.server_handling.server_baseline import APIServerConfig

    overrides = overrides or Overrides()
    for key in data:
        if key not in TOP_LEVEL_KEYS:
            raise ConfigError(_unknown_key_message(source, str(key), list(TOP_LEVEL_KEYS)))
    default_env, default_servers = env_cls.config_init()
    env_model = type(default_env)
    default_server = default_servers[0] if isinstance(default_servers, list) else default_servers

    env_section = data.get("env") or {}
    if not isinstance(env_section, dict):
        raise ConfigError(f"{source}: 'env' must be a mapping of AgenticOPDConfig fields")
    env_section = dict(env_section)
    nested_opd = env_section.pop("opd", None)  # the proxy's `opd:` shape (one OPD config shape)
    _check_keys(env_section, env_model, f"{source}: env")
    env_dict = default_env.model_dump()
    # Process-mode defaults (as Atropos' `process`), except wandb: off unless asked for.
    env_dict.update(include_messages=True, ensure_scores_are_not_same=False, use_wandb=False)
    env_dict.update(env_section)
    if nested_opd is not None:  # nested into flat names here, so that --env.* still wins
        _check_one_spelling(env_section, nested_opd, source)
        try:
            env_dict = env_model(**env_dict, opd=nested_opd).model_dump()
        except ValidationError as exc:
            raise ConfigError(_validation_message(exc, f"{source}: env")) from exc
    for key, raw in overrides.env.items():
        if key not in env_model.model_fields:
            raise ConfigError(_unknown_key_message(f"--env.{key}", key, sorted(env_model.model_fields)))
        env_dict[key] = _parse_value(raw, env_model.model_fields[key].annotation, f"env.{key}")
    try:
        env_config = env_model(**env_dict)
    except ValidationError as exc:
        raise ConfigError(_validation_message(exc, f"{source}: env")) from exc

    openai_section = data.get("openai")
    if openai_section is None:
        server_dicts: list[dict[str, Any]] = [{}]
    elif isinstance(openai_section, dict):
        server_dicts = [openai_section]
    elif (
        isinstance(openai_section, list)
        and openai_section
        and all(isinstance(s, dict) for s in openai_section)
    ):
        server_dicts = list(openai_section)
    else:
        raise ConfigError(
            f"{source}: 'openai' must be a mapping (one server) or a non-empty list of mappings"
        )
    server_model = type(default_server) if isinstance(default_server, APIServerConfig) else APIServerConfig
    for i, section in enumerate(server_dicts):
        where = f"{source}: openai" if len(server_dicts) == 1 else f"{source}: openai[{i}]"
        _check_keys(section, server_model, where)
    for index, values in overrides.openai.items():
        if index is None and len(server_dicts) > 1:
            raise ConfigError(
                f"--openai.{next(iter(values))}: the config lists {len(server_dicts)} servers; say which one "
                f"with --openai.N.KEY (N = 0..{len(server_dicts) - 1})"
            )
        target = 0 if index is None else index
        if target >= len(server_dicts):
            raise ConfigError(f"--openai.{index}.*: the config lists only {len(server_dicts)} server(s)")
        for key, raw in values.items():
            if key not in server_model.model_fields:
                name = f"--openai.{key}" if index is None else f"--openai.{index}.{key}"
                raise ConfigError(_unknown_key_message(name, key, sorted(server_model.model_fields)))
            server_dicts[target] = {
                **server_dicts[target],
                key: _parse_value(raw, server_model.model_fields[key].annotation, f"openai.{key}"),
            }
    servers = []
    for i, section in enumerate(server_dicts):
        merged = {**default_server.model_dump(), **section}
        try:
            servers.append(server_model(**merged))
        except ValidationError as exc:
            where = f"{source}: openai" if len(server_dicts) == 1 else f"{source}: openai[{i}]"
            raise ConfigError(_validation_message(exc, where)) from exc
    for i, server in enumerate(servers):
        if not server.base_url:
            raise ConfigError(f"{source}: openai[{i}].base_url is empty; set it to the vLLM URL (.../v1)")

    process_section = data.get("process") or {}
    if not isinstance(process_section, dict):
        raise ConfigError(f"{source}: 'process' must be a mapping")
    for key in process_section:
        if key not in PROCESS_KEYS:
            raise ConfigError(_unknown_key_message(f"{source}: process.{key}", str(key), list(PROCESS_KEYS)))
    concurrency = process_section.get("concurrency", 1)
    if not isinstance(concurrency, int) or isinstance(concurrency, bool) or concurrency < 1:
        raise ConfigError(f"{source}: process.concurrency must be an integer >= 1, got {concurrency!r}")
    flags = {}
    for key in ("slurm", "testing"):
        value = data.get(key, False)
        if not isinstance(value, bool):
            raise ConfigError(f"{source}: {key} must be true or false, got {value!r}")
        flags[key] = value
    raw = {
        "env": env_config.model_dump(mode="json"),
        "openai": [_masked(s.model_dump(mode="json")) for s in servers],
        "process": {"concurrency": concurrency},
        **flags,
    }
    return JobConfig(
        env=env_config, servers=servers, source=source, concurrency=concurrency, raw=raw, **flags
    )


def _masked(server: dict[str, Any]) -> dict[str, Any]:
    """A server dict fit to print: a real API key is replaced by '***'."""
    if has_key(server.get("api_key")):
        server = {**server, "api_key": "***"}
    return server


def load_job_config(
    path: str | Path | None, overrides: Overrides | None = None, *, env_cls: Any
) -> JobConfig:
    """Read `path` (None: defaults only) and apply `overrides`. Raises ConfigError."""
    data = read_yaml(path) if path is not None else {}
    return build_job_config(
        data, overrides, source=str(path) if path is not None else "<defaults>", env_cls=env_cls
    )
