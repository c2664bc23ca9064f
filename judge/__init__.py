"""Hindsight judge: prompt, parsing, vote policies and backends (LLM over an OpenAI-compatible API,
or deterministic rules). Import-free on purpose: import the submodules directly.

Typical use by the OPD pipeline:

    backend = make_judge_backend(config, server)  # judge.make_backend; server: an Endpoint  # judge.make_backend
    result = await judge_turn(pair, backend, config)   # judge.judge_turn; JudgeError if all failed
    if result.accepted: ... result.hint ...; provenance: result.as_dict()
    await backend.aclose()
"""
