"""What the two programs share: the experiment's definition (variables.py) and the results schema
(results.py). The trainer (on every VM) and the controller (plans, runs and reports experiments) import each
other's modules never, these two always."""
