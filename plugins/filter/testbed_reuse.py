"""Measurements later runs reuse (the CPU and bandwidth probes of a configuration): controller/reuse.py."""

from controller.reuse import testbed_probe_key, testbed_probe_record, testbed_reusable_probe


class FilterModule:
    def filters(self):
        return {
            "testbed_probe_key": testbed_probe_key,
            "testbed_reusable_probe": testbed_reusable_probe,
            "testbed_probe_record": testbed_probe_record,
        }
