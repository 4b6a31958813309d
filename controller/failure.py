"""A run that failed says so once, and its record says why (item 6).

Ansible reports a failed task where it happens, and a play after it may fail again on what the first failure
left undone (an undefined fact, a results directory never created). The playbook's callback
(plugins/callback/testbed_run_failure.py) keeps each host's last failure and, at the end, prints one message
naming the host, the play, the task and the cause. Where the run got past validation and reached its hosts
(their plays' own message is the one), it also writes the run's
``experiment.json`` (``complete: false``, ``failed``, ``incomplete_reason``) unless this run already wrote it
(report.yml did, and then failed on purpose) or it holds complete results.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from experiment.record import write_experiment

MESSAGE_CHARS = 400


def cause(result: dict[str, Any]) -> str:
    """One line of what a failed task returned: its msg, else its stderr, else its return code.

    >>> cause({"msg": "non-zero return code", "stderr": "Traceback ...\\nOSError: Address already in use\\n"})
    'OSError: Address already in use'
    >>> cause({"msg": "Timeout (12s) waiting for privilege escalation prompt"})
    'Timeout (12s) waiting for privilege escalation prompt'
    >>> cause({"rc": 3})
    'exit status 3'
    """
    message = str(result.get("msg") or "")
    stderr = str(result.get("stderr") or "").strip()
    if stderr and (not message or message == "non-zero return code"):
        message = stderr.splitlines()[-1]  # the last line of a traceback names the error
    if not message:
        message = f"exit status {result['rc']}" if "rc" in result else "failed"
    message = " ".join(message.split())
    return message if len(message) <= MESSAGE_CHARS else message[: MESSAGE_CHARS - 3] + "..."


def failure_message(failures: dict[str, dict[str, str]]) -> str:
    """The one message for every host that failed (host: {play, task, cause}), the first failure first.

    >>> failure_message({"peer-01": {"play": "Measure the bandwidth", "task": "Receive", "cause": "In use"}})
    "the run failed on peer-01 in 'Measure the bandwidth / Receive': In use"
    """
    parts = [f"{host} in '{f['play']} / {f['task']}': {f['cause']}" for host, f in failures.items()]
    return "the run failed on " + "; on ".join(parts)


def write_failure_record(
    experiment: dict[str, Any], failures: dict[str, dict[str, str]], started: float
) -> Path | None:
    """Write ``experiment.json`` of a run that failed after validation; None where it must not be written:
    no results directory known yet, or this run already wrote the file, or it holds complete results."""
    results_dir = experiment.get("results_dir")
    if not results_dir or experiment.get("errors"):
        return None
    path = Path(results_dir) / "experiment.json"
    if path.exists():
        if path.stat().st_mtime >= started:
            return None  # report.yml wrote it in this run
        try:
            if json.loads(path.read_text()).get("complete") is True:
                return None
        except (OSError, ValueError):
            pass
    settings = dict(experiment.get("settings") or {})
    return write_experiment(
        results_dir,
        experiment_id=str(experiment.get("experiment_id")),
        strategy=str(settings.get("strategy")),
        peers=len(experiment.get("hosts") or []),
        settings=settings,
        started=experiment.get("started"),
        complete=False,
        incomplete_reason=failure_message(failures),
        failed=failures,
    )
