"""``trainer report``: runs on the controller. Reads a results directory (data.py), computes every table
(analysis.py with the definitions in metrics.py, diagnosis.py), draws the plots (plots.py) and writes
report.md (command.py, the subcommand)."""
