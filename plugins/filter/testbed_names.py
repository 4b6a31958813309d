"""The -e names the testbed does not know: the playbooks' filters, from controller/names.py."""

from controller.names import testbed_unknown_variables


class FilterModule:
    def filters(self):
        return {
            "testbed_unknown_variables": testbed_unknown_variables,
        }
