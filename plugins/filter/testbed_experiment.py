"""Validation and planning of one experiment: the playbooks' filters, from controller/plan.py."""

from controller.plan import (
    testbed_experiment,
    testbed_host_size,
    testbed_shaped_hosts,
    testbed_this_machine,
    testbed_variable_names,
)


class FilterModule:
    def filters(self):
        return {
            "testbed_experiment": testbed_experiment,
            "testbed_variable_names": testbed_variable_names,
            "testbed_host_size": testbed_host_size,
            "testbed_shaped_hosts": testbed_shaped_hosts,
            "testbed_this_machine": testbed_this_machine,
        }
