"""The rollout machinery: the agent loop, tools, tool calls, verifier and the sandbox (sandbox/)."""
