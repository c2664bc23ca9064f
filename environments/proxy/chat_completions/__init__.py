"""The Chat Completions wire (`POST /v1/chat/completions`): its requests in, as the one
`Conversation`; the answer out, as `chat.completion` objects or `chat.completion.chunk` events."""
