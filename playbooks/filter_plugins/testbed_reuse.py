"""Measurements later runs reuse (the CPU probe of a configuration): filters from controller/reuse.py."""

from controller.reuse import cpu_probe_key, testbed_cpu_probe_record, testbed_reusable_cpu_probe


class FilterModule:
    def filters(self):
        return {
            "testbed_cpu_probe_key": cpu_probe_key,
            "testbed_reusable_cpu_probe": testbed_reusable_cpu_probe,
            "testbed_cpu_probe_record": testbed_cpu_probe_record,
        }
