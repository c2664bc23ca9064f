"""The Anthropic Messages wire (`POST /v1/messages`): request.py parses, answer.py renders,
errors.py shapes refusals, routes.py serves."""
