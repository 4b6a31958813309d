"""Ends a failed experiment run with one message naming the host, the play, the task and the cause, and
records it in the run's experiment.json (the logic: controller/failure.py; this adapts Ansible's events)."""

from __future__ import annotations

import time

from ansible.plugins.callback import CallbackBase

from controller.failure import cause, failure_message, write_failure_record

DOCUMENTATION = """
    name: testbed_run_failure
    type: aggregate
    short_description: one message, and a record, for a failed experiment run
    description:
      - Keeps each host's last failure; at the end of a playbook that validated an experiment, prints one
        message for every host that failed and writes the run's experiment.json (controller/failure.py).
    requirements:
      - enabled in ansible.cfg (callbacks_enabled)
"""

#: playbooks/validate.yml's and reach.yml's plays: their failures are the one message already, and nothing was
#: started, so no results directory is made for them
BEFORE_ANYTHING_STARTS = (
    "Validate the experiment's settings and the inventory",
    "Reach every host, and as root",
)


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "testbed_run_failure"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self._started = time.time()
        self._play = ""
        self._experiment = None
        self._failures = {}

    def v2_playbook_on_start(self, playbook):
        self._started = time.time()

    def v2_playbook_on_play_start(self, play):
        self._play = play.get_name()

    def v2_runner_on_ok(self, result):
        facts = result._result.get("ansible_facts") or {}
        if isinstance(facts.get("testbed_experiment"), dict):
            self._experiment = facts["testbed_experiment"]

    def _failed(self, result):
        if self._play not in BEFORE_ANYTHING_STARTS:
            failure = {"play": self._play, "task": result._task.get_name(), "cause": cause(result._result)}
            self._failures[result._host.get_name()] = failure

    def v2_runner_on_failed(self, result, ignore_errors=False):
        if not ignore_errors:
            self._failed(result)

    def v2_runner_on_unreachable(self, result):
        self._failed(result)

    def v2_playbook_on_stats(self, stats):
        failed = [h for h in sorted(stats.processed) if stats.failures.get(h) or stats.dark.get(h)]
        failures = {host: self._failures[host] for host in failed if host in self._failures}
        if self._experiment is None or not failures:
            return
        message = failure_message(failures)
        written = write_failure_record(self._experiment, failures, self._started)
        if written:
            message += f" (recorded in {written})"
        self._display.error(message)
