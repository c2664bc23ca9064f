"""Which weights the env samples with: the base model, or the newest LoRA adapter the trainer loaded.

With `policy_lora_prefix` set, the trainer loads its weights after step N into vLLM as
`<prefix>-step<N>` (trainer_adapters/weight_sync.py, `lora_naming: per_step`). Before each group
(and each evaluation) the env asks the policy server which models it serves and samples with the
newest such adapter; the group records N as its policy version (hermes_opd/contract/policy_version.py).
Before the first sync there is no adapter and the base model is version 0.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from hermes_opd.contract.policy_version import newest_adapter
from hermes_opd.vllm_api.client import VLLMCompletionsClient

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PolicyWeights:
    model: str
    """The model name a request sends: the base model or `<prefix>-step<N>`."""
    version: int
    """Optimizer steps behind those weights (0: the base model)."""


class PolicyAdapterTracker:
    """Resolves the newest adapter on each call; never goes back to an older version."""

    def __init__(self, client: VLLMCompletionsClient, prefix: str | None) -> None:
        self.client = client
        self.prefix = prefix
        self._newest = PolicyWeights(client.model, 0)

    async def current(self) -> PolicyWeights:
        if not self.prefix:
            return self._newest
        found = newest_adapter(self.prefix, await self.client.served_models())
        if found is not None and found[1] > self._newest.version:
            self._newest = PolicyWeights(*found)
            logger.info("sampling with adapter %s (policy version %d)", *found)
        return self._newest
