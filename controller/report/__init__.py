"""``trainer report``: runs on the controller. Reads a results directory (data.py), computes every table
(analysis.py: ``analyse`` and the experiments table, with one module per topic: breakdown.py, strategies.py,
effects.py, network.py, intervals.py, diagnosis.py, faults.py, timeouts.py; the definitions they share in
metrics.py), draws the plots (plots.py) and writes report.md (command.py, the subcommand)."""
