"""The planned faults (parsed, timed, the problems they excuse): filters from controller/faults.py."""

from controller.faults import (
    testbed_excused_problems,
    testbed_fault_timeline,
    testbed_faults,
    testbed_unapplied_faults,
)


class FilterModule:
    def filters(self):
        return {
            "testbed_faults": testbed_faults,
            "testbed_fault_timeline": testbed_fault_timeline,
            "testbed_excused_problems": testbed_excused_problems,
            "testbed_unapplied_faults": testbed_unapplied_faults,
        }
