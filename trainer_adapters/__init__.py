"""Trainer side of hermes-opd: consume Atropos `/batch` groups with distill fields and train.

Modules, one concern each:
- collate: groups -> padded tensors (the causal shift)
- group_validation: reading and checking groups against docs/distill-format.md
- losses: GRPO, token-level OPD, top-K KL (pure torch)
- student_logprobs: one log_softmax + gather (optionally chunked over T)
- objective: which batch tensor feeds which loss
- trainer_config: pydantic configs loaded from YAML
- atropos_client: /register and /batch over HTTP
- torch_trainer (+ model_loading, checkpointing, metrics_log, weight_sync): the reference trainer
- tinker_adapter: the same losses through the tinker service
- train_cli: `main(argv)` behind `hermes-opd train`
"""
