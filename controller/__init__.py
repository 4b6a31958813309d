"""The controller: plans one experiment and checks it before any host is touched (plan.py, names.py,
faults.py), summarises a finished run for the playbook (summary.py), runs grids of experiments (grid/) and
reports on their results (report/). The experiment playbooks reach it through thin filter plugins
(plugins/filter/); users through ``trainer grid`` and ``trainer report``. It never imports the
trainer: what it reads of a run is the results schema (experiment/results.py)."""
