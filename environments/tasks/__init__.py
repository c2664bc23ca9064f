"""Tasks: the `Task` record (task.py), built-in coding tasks shipped as package data (builtin.py,
data/), the built-in stdin/stdout set (stdio_builtin.py, stdio_data/), loaders for task
directories, JSONL and Hugging Face datasets (loaders.py), the three shapes of hidden tests
(suites.py: the data-style test-suite format in suite_format.py with its child side run in the
sandbox, suite_child.py; code_suite.py; stdio_suite.py) and a deterministic train/eval split
(split.py). Import-free on purpose: import the submodules directly. Importing them does not import
`datasets`."""
