"""A finished run read back, its CPU and speed fairness, its summary: filters from controller/summary.py; the
compute it received (controller/received_compute.py); its record checked against experiment.json's schema
(experiment/record.py)."""

from controller.received_compute import testbed_received_compute, testbed_received_compute_line
from controller.summary import (
    testbed_clock_check,
    testbed_cpu_fairness,
    testbed_experiment_record,
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
            "testbed_received_compute": testbed_received_compute,
            "testbed_received_compute_line": testbed_received_compute_line,
            "testbed_summary_table": testbed_summary_table,
            "testbed_clock_check": testbed_clock_check,
            "testbed_experiment_record": testbed_experiment_record,
        }
