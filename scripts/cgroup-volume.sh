#!/usr/bin/env bash
# The one bind mount a local container running systemd needs on this host (the local cluster's, the image
# build's, the stand-in VMs', the Molecule scenarios'), as podman's --volume value:
#   hybrid cgroup v1, with a cgroup2 hierarchy at /sys/fs/cgroup/unified: that hierarchy, read-write (without
#     it systemd inside never sees its units' processes exit: 90 s "deactivating", then failed);
#   unified cgroup v2 (Debian 12, Ubuntu 22.04 and later, Fedora by default) or v1 without it: nothing is
#     needed (podman's systemd mode gives the container its own cgroup), and since a Molecule scenario lists
#     its volumes whatever the host, a read-only bind of /dev/null that nothing reads.
# TESTBED_PROC_MOUNTS reads another mount table (tests/images/test_cgroup_volume.py).
set -euo pipefail
mounts=${TESTBED_PROC_MOUNTS:-/proc/mounts}
if awk '$2 == "/sys/fs/cgroup/unified" && $3 == "cgroup2" { found = 1 } END { exit !found }' "$mounts"; then
  echo "/sys/fs/cgroup/unified:/sys/fs/cgroup/unified:rw"
else
  echo "/dev/null:/run/testbed-no-cgroup-volume:ro"
fi
