"""Tasks: the `Task` record (task.py), built-in coding tasks (builtin.py), loaders for JSONL and
Hugging Face datasets (loaders.py), and a deterministic train/eval split (split.py). Import-free on
purpose: import the submodules directly. Importing them does not import `datasets`."""
