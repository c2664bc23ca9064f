"""AgenticOPDEnv: the Atropos environment, its agent loop, tools, sandbox, tasks and verifier.

Kept import-free on purpose: import submodules directly (e.g. `environments.rollout.sandbox.sandbox`).
"""
