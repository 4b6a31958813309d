"""The trainer_service role's filters: a trainer host's poll output read, from controller/progress.py."""

from controller.progress import (
    testbed_failed_hosts,
    testbed_join_multiaddr,
    testbed_progress_line,
    testbed_run_problem,
    testbed_run_problems,
    testbed_unit_state,
)


class FilterModule:
    def filters(self):
        return {
            "testbed_unit_state": testbed_unit_state,
            "testbed_progress_line": testbed_progress_line,
            "testbed_run_problem": testbed_run_problem,
            "testbed_failed_hosts": testbed_failed_hosts,
            "testbed_run_problems": testbed_run_problems,
            "testbed_join_multiaddr": testbed_join_multiaddr,
        }
