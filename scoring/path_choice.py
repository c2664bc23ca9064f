"""Which teacher path scores the turns: the configured one, or for `auto` the cheapest available.

Paths, cheapest first (docs/scaling.md has the measured costs):
- `transformers`: in-process, one forward pass and top-K over the turn's rows only. Needs the
  teacher's weights on this machine (`teacher.local_model_dir`); cost per turn = a prefill.
- `generate`: vLLM's `/inference/v1/generate` with detokenize off (server started with
  `--enable-scale-out`). Same rows as `completions`, about 3x cheaper per context position.
- `completions`: `/v1/completions` with `prompt_logprobs`, any vLLM; the fallback.

`auto` takes `transformers` when a local model directory is configured, else `generate` when the
server answers a one-token probe on that route, else `completions`. `choose_path` is the pure rule;
`probe_generate` is the one HTTP call it needs.
"""

from __future__ import annotations

from dataclasses import dataclass

from hermes_opd.vllm_api import http
from hermes_opd.vllm_api.client import VLLMCompletionsClient
from hermes_opd.vllm_api.errors import ServerUnreachableError, TransientServerError
from scoring.request_paths import generate_payload, generate_url

PATHS = ("auto", "transformers", "generate", "completions")
SERVER_PATHS = ("generate", "completions")


@dataclass(frozen=True)
class PathChoice:
    path: str
    reason: str

    def log_line(self, where: str) -> str:
        return f"teacher path: {self.path} ({self.reason}) [{where}]"


@dataclass(frozen=True)
class GenerateProbe:
    """What the server said to a one-token request on the generate route."""

    status: int | None
    """HTTP status, or None when the request itself failed."""
    detail: str = ""

    @property
    def available(self) -> bool:
        return self.status == 200


def choose_path(configured: str, local_model_dir: str | None, probe: GenerateProbe | None) -> PathChoice:
    """The path for a configuration (`probe` is only needed for `auto` without a local model)."""
    if configured not in PATHS:
        raise ValueError(f"unknown teacher path {configured!r}; expected one of {PATHS}")
    if configured == "transformers":
        if not local_model_dir:
            raise ValueError(
                "teacher path 'transformers' needs teacher.local_model_dir (the teacher's weights)"
            )
        return PathChoice("transformers", f"configured; in-process from {local_model_dir}")
    if configured != "auto":
        return PathChoice(configured, "configured")
    if local_model_dir:
        return PathChoice(
            "transformers", f"auto: local model {local_model_dir} scores in-process at prefill cost"
        )
    if probe is not None and probe.available:
        return PathChoice("generate", "auto: the server answers /inference/v1/generate (--enable-scale-out)")
    said = "no answer" if probe is None or probe.status is None else f"HTTP {probe.status}"
    detail = f": {probe.detail}" if probe is not None and probe.detail else ""
    return PathChoice(
        "completions",
        f"auto: /inference/v1/generate unavailable ({said}{detail}); start vLLM with --enable-scale-out "
        "for the ~3x cheaper generate path",
    )


async def probe_generate(
    client: VLLMCompletionsClient, probe_ids: list[int], timeout_s: float = 30.0
) -> GenerateProbe:
    """One 1-token request with `prompt_logprobs: 1` on the generate route; never raises."""
    payload = generate_payload(client.model, probe_ids, 1)
    try:
        answer = await http.request(
            "POST", generate_url(client), api_key=client.api_key, payload=payload, timeout_s=timeout_s
        )
    except (ServerUnreachableError, TransientServerError) as exc:
        return GenerateProbe(None, str(exc)[:160])
    if answer.status == 200 and '"prompt_logprobs"' not in answer.text:
        return GenerateProbe(None, "answered without prompt_logprobs")
    return GenerateProbe(answer.status, "" if answer.status == 200 else answer.text[:120].strip())
