"""Evaluation data for the judge's lexical readers, and the scripts that score a reader on it."""
