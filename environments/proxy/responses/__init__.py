"""The Responses wire (`POST /v1/responses`): request.py parses, answer.py renders, errors.py
shapes refusals, routes.py serves."""
