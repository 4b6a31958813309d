"""The controller's machine during a run (what else loaded it): the playbooks' filters, from
controller/host_load.py."""

from controller.host_load import host_load, snapshot


class FilterModule:
    def filters(self):
        return {"testbed_host_snapshot": snapshot, "testbed_host_load": host_load}
