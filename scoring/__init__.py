"""Teacher scoring: vLLM prompt logprobs over [enhanced context] + [the student's exact turn ids]."""
