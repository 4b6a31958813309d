"""A finished run read back, its CPU and speed fairness, its summary: filters from controller/summary.py."""

from controller.summary import (
    testbed_clock_check,
    testbed_cpu_fairness,
    testbed_host_records,
    testbed_read_summaries,
    testbed_speed_fairness,
    testbed_summary_table,
)


class FilterModule:
    def filters(self):
        return {
            "testbed_read_summaries": testbed_read_summaries,
            "testbed_host_records": testbed_host_records,
            "testbed_cpu_fairness": testbed_cpu_fairness,
            "testbed_speed_fairness": testbed_speed_fairness,
            "testbed_summary_table": testbed_summary_table,
            "testbed_clock_check": testbed_clock_check,
        }
