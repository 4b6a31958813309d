"""``trainer grid``: runs on the controller. A grid file (spec.py, its expressions expr.py, the playbook
variables it may set vars.py) becomes a list of experiments that runner.py runs one by one through
playbooks/experiment.yml, recording progress in a status file (status.py); command.py is the subcommand."""
