"""The planned faults and cross traffic (parsed, timed, the problems they excuse): filters from
controller/faults.py and controller/cross_traffic.py."""

from controller.cross_traffic import testbed_cross_traffic, testbed_with_target_address
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
            "testbed_cross_traffic": testbed_cross_traffic,
            "testbed_with_target_address": testbed_with_target_address,
            "testbed_fault_timeline": testbed_fault_timeline,
            "testbed_excused_problems": testbed_excused_problems,
            "testbed_unapplied_faults": testbed_unapplied_faults,
        }
