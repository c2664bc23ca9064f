"""`hermes-opd proxy`: an OpenAI-compatible server in front of a vLLM policy that turns live
sessions into OPD samples (docs/proxy.md). A second producer next to the env: it records turns with
the env's transcript recorder, parses tool calls with the env's parser, scores turns with the one
OPD pipeline and builds groups with the env's group builder."""
