"""Typed configs of the trainers, loaded from YAML (configs/trainer-torch.yaml, trainer-tinker.yaml).

Every model forbids unknown keys: a misspelt key (`w_opdd: 0.5`) fails loudly with the dotted path
of the key and the file, instead of silently training with the default.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from hermes_opd.contract.errors import ConfigError


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class AtroposConfig(_Strict):
    """Where the Atropos API runs and what the trainer registers with it (POST /register)."""

    url: str = Field("http://127.0.0.1:8000", description="Base URL of the Atropos API (`run-api`).")
    batch_size: int = Field(
        32, gt=0, description="Sequences per training step; the API assembles /batch to exactly this many."
    )
    max_token_len: int = Field(4096, gt=1, description="Longest sequence (tokens) the trainer accepts.")
    wandb_group: str = Field("hermes-opd", description="Sent to /register; envs read it from /wandb_info.")
    wandb_project: str = Field("hermes-opd", description="Sent to /register; envs read it from /wandb_info.")
    request_timeout_s: float = Field(30.0, gt=0, description="Timeout of one HTTP request to the API.")
    poll_initial_s: float = Field(0.5, gt=0, description="First wait after an empty /batch answer.")
    poll_max_s: float = Field(
        10.0, gt=0, description="Longest wait between /batch polls (exponential backoff)."
    )
    poll_timeout_s: float = Field(
        3600.0, gt=0, description="Give up (error) when no batch arrives for this long."
    )
    max_policy_lag: int | None = Field(
        1,
        ge=0,
        description="Bounded staleness: a group sampled by weights more than this many optimizer steps "
        "older than the weights it would train is dropped, counted (`policy/stale_groups_dropped`) and "
        "not trained on. 1 (the default) allows the one step of overlap of sampling and training; 0 "
        "trains only on samples of the current weights; None turns the bound off (the earlier "
        "behaviour). Groups without a policy version are always kept (docs/trainers.md).",
    )


class LossConfig(_Strict):
    """Weights and shapes of the loss terms (trainer_adapters/losses.py, docs/trainers.md)."""

    w_grpo: float = Field(1.0, ge=0, description="Weight of the GRPO term; 0 turns it off (still logged).")
    w_opd: float = Field(1.0, ge=0, description="Weight of the OPD term; 0 turns it off (still logged).")
    w_prm: float = Field(
        0.0,
        ge=0,
        description="Weight of the process-reward (PRM, Binary RL) term: each turn's +1/-1/0 score as a "
        "PPO-clipped advantage over its tokens (docs/process-reward.md); 0 turns it off (still logged). "
        "Combined mode (OpenClaw-RL's combine): w_grpo 0, w_prm 1, w_opd 1.",
    )
    opd_sign: Literal[1, -1] = Field(
        1,
        description="A control, never a training setting: -1 negates the OPD term, so the student is "
        "trained away from the hinted teacher (the sign-flip arm of docs/recipes/learning-bench.md).",
    )
    prm_clip_low: float = Field(0.2, ge=0, lt=1, description="PRM term: PPO ratio clip below, 1 - eps.")
    prm_clip_high: float = Field(0.28, ge=0, description="PRM term: PPO ratio clip above, 1 + eps.")
    opd_mode: Literal["topk", "token", "subset_ppo"] = Field(
        "topk",
        description="topk: KL over the vocabulary subset's bins + a tail bin; token: clipped teacher-student "
        "logprob gap as a per-token advantage; subset_ppo: PPO-clipped OPD over the subset, each id weighted "
        "by the old policy's probability (OpenClaw-RL's combine mode).",
    )
    opd_vocab: Literal["teacher_topk", "student_topk", "overlap", "union"] = Field(
        "teacher_topk",
        description="topk and subset_ppo modes: the ids the OPD term runs over. teacher_topk: the teacher's "
        "row; student_topk: the sampler's own top-K (needs overrides[seq]['student_topk'] from the env); "
        "overlap / union: both / either. An id whose teacher logprob is unknown is left out.",
    )
    opd_diff_clip: float | None = Field(
        None,
        gt=0,
        description="Clip on the teacher-minus-student logprob gap, every mode: topk clips each bin's "
        "target to within c of the student; token replaces opd_advantage_clip; subset_ppo clips the "
        "advantage. null: no clip (token mode then uses opd_advantage_clip).",
    )
    opd_clip_low: float = Field(0.2, ge=0, lt=1, description="subset_ppo: ratio clip below, 1 - eps.")
    opd_clip_high: float = Field(0.28, ge=0, description="subset_ppo: ratio clip above, 1 + eps.")
    kl_direction: Literal["reverse", "forward"] = Field(
        "reverse",
        description="topk mode: reverse = KL(student||teacher) (mode seeking), forward = KL(teacher||student).",
    )
    opd_advantage_clip: float = Field(
        5.0,
        gt=0,
        description="token mode: A_t = clip(teacher_lp - student_lp, -c, c), unless opd_diff_clip is set.",
    )
    opd_token_objective: Literal["pg", "ppo"] = Field(
        "pg",
        description="token mode: pg = -A_t * lp_t; ppo = PPO-clipped ratio against inference_logprobs.",
    )
    clip_low: float = Field(0.2, ge=0, lt=1, description="PPO ratio clip below: 1 - clip_low.")
    clip_high: float = Field(0.2, ge=0, description="PPO ratio clip above: 1 + clip_high.")
    advantage_eps: float = Field(1e-6, gt=0, description="GRPO: (score - mean) / (std + eps).")
    normalize_advantage_std: bool = Field(
        True, description="GRPO: divide by the group std (False: mean-centred only, as in Dr. GRPO)."
    )
    student_temperature: float = Field(
        1.0,
        gt=0,
        description="Student logprobs are log_softmax(logits / T). Keep 1.0: vLLM's inference and teacher "
        "logprobs are raw (temperature 1) by default. See docs/trainers.md.",
    )

    @model_validator(mode="after")
    def _vocab_fits_mode(self) -> LossConfig:
        if self.opd_mode == "token" and self.opd_vocab != "teacher_topk":
            raise ValueError(
                f"opd_vocab {self.opd_vocab!r} needs opd_mode 'topk' or 'subset_ppo'; token mode scores only "
                "the sampled token"
            )
        return self

    @property
    def token_gap_clip(self) -> float:
        """The clip of token mode's advantage: opd_diff_clip when set, else opd_advantage_clip."""
        return self.opd_advantage_clip if self.opd_diff_clip is None else self.opd_diff_clip


class LoraConfig(_Strict):
    """LoRA through peft. Off means full fine-tuning."""

    enabled: bool = Field(False, description="Train a LoRA adapter instead of all weights.")
    r: int = Field(16, gt=0, description="LoRA rank.")
    alpha: float = Field(32.0, gt=0, description="LoRA alpha (scale = alpha / r).")
    dropout: float = Field(
        0.0,
        ge=0,
        description="LoRA dropout: must be 0. Dropout in the policy forward makes even on-policy log ratios "
        "non-zero; the trainer switches every dropout off (trainer_adapters/dropout.py).",
    )
    target_modules: list[str] | str = Field(
        "all-linear", description="Module names to adapt, or 'all-linear' (peft's shorthand)."
    )

    @field_validator("dropout")
    @classmethod
    def _no_dropout(cls, value: float) -> float:
        if value != 0:
            raise ValueError(
                f"LoRA dropout {value} is not supported: dropout in the policy forward makes the GRPO "
                "ratio and the OPD gap noisy even on on-policy data; set model.lora.dropout: 0"
            )
        return value


class ModelConfig(_Strict):
    """The policy model (a transformers causal LM)."""

    path: str = Field(..., description="Local directory (or hub id) of the model to train.")
    dtype: Literal["auto", "float32", "bfloat16"] = Field(
        "auto", description="auto: bfloat16 on CUDA, float32 on CPU."
    )
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="auto: CUDA when available.")
    trust_remote_code: bool = Field(False, description="Passed to from_pretrained.")
    gradient_checkpointing: bool = Field(False, description="Recompute activations in the backward pass.")
    pad_token_id: int | None = Field(
        None, description="Id used for padding; default: the model config's pad id, else 0."
    )
    lora: LoraConfig = Field(default_factory=LoraConfig, description="LoRA settings.")


class OptimConfig(_Strict):
    """AdamW and the step."""

    lr: float = Field(1e-6, gt=0, description="Learning rate.")
    weight_decay: float = Field(0.0, ge=0, description="AdamW decoupled weight decay.")
    betas: tuple[float, float] = Field((0.9, 0.999), description="AdamW betas.")
    eps: float = Field(1e-8, gt=0, description="AdamW eps.")
    max_grad_norm: float | None = Field(1.0, description="Clip the global grad norm; null disables.")
    warmup_steps: int = Field(0, ge=0, description="Linear learning-rate warmup over this many steps.")
    micro_batch_size: int = Field(
        4, gt=0, description="Sequences per forward/backward; gradients accumulate over the whole batch."
    )
    logprob_chunk_size: int | None = Field(
        None,
        gt=0,
        description="Compute log_softmax over T-chunks of this size (saves memory on long sequences); "
        "null: the model's own logits in one piece.",
    )


class CheckpointConfig(_Strict):
    """Where and how often to checkpoint; resume picks the latest complete one."""

    dir: str = Field("runs/torch/checkpoints", description="Checkpoint root; one step_<N>/ per checkpoint.")
    every_steps: int = Field(50, ge=0, description="Save every N steps (0: only at the end).")
    keep_last: int = Field(3, ge=1, description="Delete older checkpoints beyond this many.")
    keep_every: int = Field(
        0, ge=0, description="Never delete a checkpoint whose step is a multiple of this (0: none)."
    )
    resume: bool = Field(True, description="Start from the latest complete checkpoint in `dir` if any.")


class LoggingConfig(_Strict):
    """Metrics output."""

    metrics_path: str | None = Field(
        "runs/torch/metrics.jsonl", description="One JSON object per step is appended; null: no file."
    )
    stdout: bool = Field(True, description="Also print a one-line summary per step.")


class WeightSyncConfig(_Strict):
    """How the inference server gets the new weights (docs/trainers.md, "Weight sync")."""

    mode: Literal["none", "command", "vllm_lora"] = Field(
        "none",
        description="none; command: run `command` after saving a checkpoint; vllm_lora: POST the adapter "
        "to vLLM's /v1/load_lora_adapter (needs LoRA, --enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=1).",
    )
    every_steps: int = Field(1, gt=0, description="Sync every N steps (a checkpoint is saved first).")
    command: list[str] = Field(
        default_factory=list,
        description="command mode: argv, no shell; '{checkpoint}' and '{step}' are substituted.",
    )
    vllm_url: str = Field("http://127.0.0.1:9001", description="vllm_lora mode: the vLLM server's base URL.")
    lora_name: str = Field(
        "policy",
        description="vllm_lora mode: the adapter name (inplace) or prefix (per_step: <lora_name>-step<N>).",
    )
    lora_naming: Literal["per_step", "inplace"] = Field(
        "per_step",
        description="vllm_lora mode: per_step loads a new adapter per sync and unloads older ones (the env "
        "samples the newest, policy_lora_prefix); inplace replaces one name with load_inplace, which vLLM "
        "0.32 re-reads from disk on every engine step that serves it.",
    )
    keep_adapters: int = Field(
        2, ge=1, description="vllm_lora per_step: newest adapters kept loaded (rollouts in flight finish)."
    )
    load_inplace: bool = Field(
        True, description="vllm_lora inplace: replace the adapter under the same name (vLLM >= 0.10)."
    )
    timeout_s: float = Field(300.0, gt=0, description="Timeout of the command or the HTTP call.")
    fail_on_error: bool = Field(
        True, description="Stop training when a sync fails (False: log it and go on with stale weights)."
    )


class TorchTrainerConfig(_Strict):
    """The reference torch trainer (trainer_adapters/torch_trainer.py)."""

    trainer: Literal["torch"] = Field("torch", description="Selects this trainer in `hermes-opd train`.")
    num_steps: int = Field(
        100, gt=0, description="Optimizer steps to run (counting from step 0, resume included)."
    )
    seed: int = Field(0, description="Torch seed.")
    atropos: AtroposConfig = Field(default_factory=AtroposConfig, description="The Atropos API.")
    model: ModelConfig = Field(..., description="The policy model.")
    optim: OptimConfig = Field(default_factory=OptimConfig, description="Optimizer and step.")
    loss: LossConfig = Field(default_factory=LossConfig, description="Loss terms.")
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig, description="Checkpoints.")
    logging: LoggingConfig = Field(default_factory=LoggingConfig, description="Metrics.")
    weight_sync: WeightSyncConfig = Field(default_factory=WeightSyncConfig, description="Weight sync.")

    @model_validator(mode="after")
    def _lora_sync_needs_lora(self) -> TorchTrainerConfig:
        if self.weight_sync.mode == "vllm_lora" and not self.model.lora.enabled:
            raise ValueError("weight_sync.mode 'vllm_lora' needs model.lora.enabled: true")
        if self.weight_sync.mode == "command" and not self.weight_sync.command:
            raise ValueError("weight_sync.mode 'command' needs weight_sync.command (an argv list)")
        return self


class TinkerConfig(_Strict):
    """The tinker service side."""

    base_model: str = Field(..., description="Tinker base model name, e.g. Qwen/Qwen3-4B-Instruct-2507.")
    lora_rank: int = Field(32, gt=0, description="LoRA rank of the tinker training client.")
    base_url: str | None = Field(
        None, description="Tinker service URL; null: the SDK default / TINKER_BASE_URL."
    )
    learning_rate: float = Field(4e-5, gt=0, description="Adam learning rate.")
    beta1: float = Field(0.9, description="Adam beta1.")
    beta2: float = Field(0.95, description="Adam beta2.")
    eps: float = Field(1e-8, gt=0, description="Adam eps.")
    weight_decay: float = Field(0.0, ge=0, description="Adam decoupled weight decay.")
    grad_clip_norm: float = Field(0.0, ge=0, description="Global grad-norm clip on the service (0: off).")
    grpo_loss_fn: Literal["custom"] = Field(
        "custom",
        description="How the GRPO term reaches tinker. `custom` (the only choice): the whole objective, "
        "GRPO clipped with loss.clip_low/clip_high and OPD, through one forward_backward_custom, so it "
        "is the torch trainer's loss exactly (trainer_adapters/tinker_objective.py).",
    )
    server_loss_reduction: Literal["sum", "per_datum_mean"] = Field(
        "sum",
        description="How the service reduces a built-in loss over tokens and datums. `sum` (the hosted "
        "tinker API): the objective goes through the SDK's forward_backward_custom. `per_datum_mean` "
        "(skyrl 0.4.0's local server: each datum's loss divided by the sum of its weights, then the "
        "mean over datums, which rescales forward_backward_custom's signed weights per datum): the "
        "adapter sends the objective's gradient as an importance_sampling surrogate that this "
        "reduction divides back out exactly (token mode only; docs/trainers.md).",
    )
    save_every_steps: int = Field(
        1, gt=0, description="save_weights_for_sampler every N steps (the sampler needs fresh weights)."
    )
    state_every_steps: int = Field(
        0, ge=0, description="save_state (resumable) every N steps; 0: only at the end."
    )
    run_name: str = Field("hermes-opd", description="Prefix of tinker checkpoint names.")

    @model_validator(mode="before")
    @classmethod
    def _builtin_grpo_losses_are_gone(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        if data.get("grpo_loss_fn") in ("importance_sampling", "ppo"):
            raise ValueError(
                f"tinker.grpo_loss_fn {data['grpo_loss_fn']!r} is not supported: tinker's "
                "importance_sampling has no ratio clipping, and a built-in loss would not be the torch "
                "trainer's GRPO. The adapter runs the whole objective through forward_backward_custom, "
                "clipped with loss.clip_low/loss.clip_high; remove the key or set it to 'custom'"
            )
        if data.get("grpo_loss_fn_config") is not None:
            raise ValueError(
                "tinker.grpo_loss_fn_config is not used any more: the GRPO clip thresholds are "
                "loss.clip_low and loss.clip_high, shared with the torch trainer; remove the key"
            )
        return {key: value for key, value in data.items() if key != "grpo_loss_fn_config"}


class TinkerTrainerConfig(_Strict):
    """The tinker adapter (trainer_adapters/tinker_adapter.py)."""

    trainer: Literal["tinker"] = Field("tinker", description="Selects this trainer in `hermes-opd train`.")
    num_steps: int = Field(100, gt=0, description="Optimizer steps to run.")
    atropos: AtroposConfig = Field(default_factory=AtroposConfig, description="The Atropos API.")
    tinker: TinkerConfig = Field(..., description="The tinker service.")
    loss: LossConfig = Field(
        default_factory=LossConfig, description="Loss terms (student_temperature must stay 1)."
    )
    logging: LoggingConfig = Field(
        default_factory=lambda: LoggingConfig(metrics_path="runs/tinker/metrics.jsonl"),
        description="Metrics.",
    )
    state_path: str = Field(
        "runs/tinker/state.json", description="Local record of the last tinker checkpoint paths (for resume)."
    )

    @model_validator(mode="after")
    def _tinker_temperature(self) -> TinkerTrainerConfig:
        if self.loss.student_temperature != 1.0:
            raise ValueError("tinker returns raw logprobs; loss.student_temperature must be 1.0")
        return self


def _describe(error: dict[str, Any]) -> str:
    loc = ".".join(str(part) for part in error["loc"] if part not in ("torch", "tinker"))
    if error["type"] == "extra_forbidden":
        return f"{loc}: unknown key (not part of the config schema; check the spelling)"
    if error["type"] == "missing":
        return f"{loc}: required key is missing"
    return f"{loc or '<top level>'}: {error['msg']}"


def parse_trainer_config(data: Any, source: str = "<config>") -> TorchTrainerConfig | TinkerTrainerConfig:
    """Validate a dict (from YAML) into a trainer config; `trainer:` selects which (default torch)."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the config must be a mapping, got {type(data).__name__}")
    data = {"trainer": "torch", **data}
    if data["trainer"] not in ("torch", "tinker"):
        raise ConfigError(f"{source}: trainer: must be 'torch' or 'tinker', got {data['trainer']!r}")
    model = TorchTrainerConfig if data["trainer"] == "torch" else TinkerTrainerConfig
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = "\n  ".join(_describe(e) for e in exc.errors())
        raise ConfigError(f"{source}: invalid {model.__name__}:\n  {problems}") from None


def load_trainer_config(path: str | Path) -> TorchTrainerConfig | TinkerTrainerConfig:
    """Read and validate a YAML trainer config."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    return parse_trainer_config(data, str(path))
