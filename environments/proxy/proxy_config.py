"""Configuration of `hermes-opd proxy` (docs/proxy.md), as one pydantic model."""

from __future__ import annotations

import ipaddress

from pydantic import BaseModel, ConfigDict, Field, model_validator

from environments.pipeline.opd_config import OPDConfig

SESSION_HEADER = "X-Session-Id"
"""Names the session a request belongs to. Without it, a request continues the session whose
history (with the proxy's last reply) it re-sends, or starts a new one."""
TRAIN_HEADER = "X-Hermes-Train"
"""`false`, `0`, `off` or `no`: answer the request but never train on it (side calls, opt-out)."""
END_HEADER = "X-Session-End"
"""`true`: this request is the session's last; its turn is flushed once answered."""


class ProxyConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    policy_base_url: str = Field(description="The vLLM policy server (…/v1).")
    policy_model: str = Field(description="The base model's served name on the policy server.")
    policy_api_key: str | None = Field(default=None, description="Key of the policy server, if any.")
    tokenizer: str = Field(description="The policy's tokenizer and chat template (a local model directory).")
    served_model_name: str | None = Field(
        default=None, description="The model name clients ask for (default: policy_model)."
    )
    host: str = Field(default="127.0.0.1", description="Bind address. Anything but loopback needs api_keys.")
    port: int = Field(default=8100, ge=0, le=65535)
    api_keys: list[str] = Field(default_factory=list, description="Keys whose sessions are trained on.")
    serve_only_keys: list[str] = Field(
        default_factory=list, description="Keys that are answered, never trained on."
    )
    train: bool = Field(default=True, description="Turn sessions into samples (False: a plain proxy).")
    groups_path: str = Field(
        default="proxy-groups.jsonl", description="Where groups are appended (without atropos_url)."
    )
    atropos_url: str | None = Field(
        default=None,
        description="Send groups to this Atropos API (through the send spool) instead of the file.",
    )
    spool_dir: str | None = Field(
        default=None, description="The send spool's directory (default: <groups_path>.spool)."
    )
    policy_lora_prefix: str | None = Field(
        default=None, description="Serve the newest `<prefix>-step<N>` adapter."
    )
    adapter_poll_s: float = Field(default=2.0, gt=0, description="How often the adapter list is read.")
    default_max_tokens: int = Field(default=512, ge=1, description="max_tokens when a request sets none.")
    max_request_bytes: int = Field(default=4 * 1024 * 1024, ge=1024, description="Larger bodies get 413.")
    max_request_depth: int = Field(
        default=64, ge=8, le=1000, description="Deepest nesting of a request body's JSON (deeper: 400)."
    )
    header_read_timeout_s: float = Field(
        default=30.0,
        gt=0,
        description="A connection must send a request's headers within this (and idles at most this long between requests).",
    )
    body_read_timeout_s: float = Field(
        default=30.0, gt=0, description="A request body must arrive within this (a trickled one: 408)."
    )
    max_bytes_in_flight: int = Field(
        default=64 * 1024 * 1024,
        ge=1024,
        description="Request bytes being read at once (beyond: 503, retry).",
    )
    max_prompt_tokens: int = Field(
        default=131072, ge=16, description="A request whose rendered prompt is longer gets 413."
    )
    plan_threads: int = Field(
        default=2, ge=1, le=64, description="Threads that render and tokenize requests (off the event loop)."
    )
    max_planning: int = Field(
        default=64, ge=1, description="Requests waiting to be rendered at once (beyond: 503, retry)."
    )
    session_idle_s: float = Field(
        default=300.0, gt=0, description="An idle session is flushed and forgotten."
    )
    max_sessions: int = Field(
        default=4096, ge=1, description="Sessions held at once (the oldest idle one goes)."
    )
    max_sessions_per_key: int = Field(
        default=1024, ge=1, description="Sessions one key holds at once (its own oldest idle one goes)."
    )
    max_branches_per_session: int = Field(
        default=4, ge=1, description="Records one session holds at once (docs/proxy/sessions.md)."
    )
    max_session_tokens: int = Field(
        default=65536, ge=16, description="Tokens one session's records hold (its oldest branch goes)."
    )
    max_held_tokens: int = Field(
        default=8_000_000, ge=16, description="Tokens all sessions' records hold together."
    )
    max_trained_turns_per_session: int = Field(
        default=32, ge=1, description="Later turns are served, not trained."
    )
    max_sample_tokens: int = Field(
        default=65536,
        ge=16,
        description="A turn whose context is longer is served, not trained (coding agents' first "
        "prompts are 10k-30k tokens).",
    )
    queue_size: int = Field(default=256, ge=1, description="Finished turns waiting for the pipeline.")
    workers: int = Field(default=4, ge=1, description="Turns in the pipeline at once.")
    samples_per_group: int = Field(default=4, ge=1, description="Samples per ScoredDataGroup.")
    group_wait_s: float = Field(default=30.0, gt=0, description="A partial group goes out after this wait.")
    retry_window_s: float = Field(
        default=3600.0, gt=0, description="How long a turn whose judge/teacher failed is retried."
    )
    retry_backoff_s: float = Field(
        default=1.0,
        gt=0,
        description="First wait before a failed turn is tried again (doubling, at most 30 s).",
    )
    whole_groups: bool | None = Field(
        default=None,
        description="Send only groups of one size that divides the trainer's batch size, never partial ones "
        "(environments/delivery/api_packing.py). Default: on with atropos_url, off for a file.",
    )
    pending_turns_path: str | None = Field(
        default=None,
        description="Turns not delivered at stop are saved here and reloaded at the next start "
        "(default: <groups_path>.pending-turns.jsonl).",
    )
    opd: OPDConfig = Field(default_factory=OPDConfig, description="The OPD pipeline (judge, teacher).")

    @model_validator(mode="after")
    def _keys_off_loopback(self) -> ProxyConfig:
        if not self.api_keys and not self.serve_only_keys and not _is_loopback(self.host):
            raise ValueError(
                f"binding {self.host} needs API keys: whoever can talk to the proxy can steer the weights "
                "(set api_keys / serve_only_keys, or HERMES_OPD_PROXY_KEYS)"
            )
        if set(self.api_keys) & set(self.serve_only_keys):
            raise ValueError("a key cannot be both a training key and a serve-only key")
        return self

    @property
    def model_name(self) -> str:
        return self.served_model_name or self.policy_model


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
