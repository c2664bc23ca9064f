"""Benchmarks that compare this project with the reference design (`hermes-opd bench ...`).

Each benchmark lives in its own module and returns one flat-ish JSON object whose LAST key is the
headline ratio (larger is better). `cli.py` parses the command line, repeats runs and reports
medians. See docs/benchmarks.md for the commands and the figures measured on the dev machine.
"""
