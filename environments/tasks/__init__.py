"""Tasks: the `Task` record (task.py), built-in coding tasks shipped as package data (builtin.py,
data/), loaders for task directories, JSONL and Hugging Face datasets (loaders.py), data-style hidden
tests: the test-suite format (suite_format.py) and its child side run in the sandbox
(suite_child.py), and a deterministic train/eval split (split.py). Import-free on purpose: import
the submodules directly. Importing them does not import `datasets`."""
