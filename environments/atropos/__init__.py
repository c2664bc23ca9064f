"""The Atropos adapter: the atroposlib env, its config, its CLI and server class, config loading.
The only part of `environments/` that imports atroposlib."""
