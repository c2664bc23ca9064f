"""The sandbox: directory, commands and output (sandbox.py), limits and errors (limits.py), namespaces
wrapper (isolation.py), allow-list root (root.py), container disk (disk.py), process trees
(process_tree.py). Import the submodules directly."""
