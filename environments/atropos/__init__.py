"""The Atropos adapter: the env, its config, CLI, server class, send spool, config loading, role
servers and group builder. The only part of `environments/` that imports atroposlib or knows a URL."""
