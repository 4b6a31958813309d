"""The local cluster's container sizes: the playbooks' filters, from controller/local_cluster.py."""

from controller.local_cluster import (
    testbed_container_sizes,
    testbed_inspected_containers,
)


class FilterModule:
    def filters(self):
        return {
            "testbed_container_sizes": testbed_container_sizes,
            "testbed_inspected_containers": testbed_inspected_containers,
        }
