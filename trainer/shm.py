"""Shared-memory files an earlier trainer left behind (a run leaves nothing that breaks the next).

Hivemind shares its averagers' tensors with torch's ``file_system`` strategy (hivemind/utils/mpfuture.py):
each is a file ``/dev/shm/torch_<pid>_<random>_<n>`` that torch's manager removes once every process using
it is gone. A trainer whose processes were killed (a stopped unit, a restart under churn, a crash) leaves
them: about 90-130 MB a ResNet18 run, until the host's /dev/shm is full and the next run fails at its first
shared tensor ("unable to allocate shared memory(shm) ... No space left on device"; seen after 11 runs of
grids/communication.yml in containers with 1 GB of /dev/shm). So a trainer removes, as it starts, the files
whose creating process no longer runs; those of live processes (another trainer on the same host, as the
tests' loopback peers) stay.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

log = logging.getLogger(__name__)

SHM = Path("/dev/shm")
#: torch's file_system strategy's names: torch_<creating pid>_<random>_<counter>
TORCH_FILE = re.compile(r"torch_(\d+)_")


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's: running
        return True
    return True


def remove_stale(directory: Path | None = None) -> dict[str, int]:
    """Remove torch's shared-memory files whose creating process is gone (in ``directory``, /dev/shm by
    default); {"files", "bytes"} removed.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     _ = (Path(d) / f"torch_{os.getpid()}_1_1").write_bytes(b"mine")
    ...     _ = (Path(d) / "torch_999999999_2_1").write_bytes(b"stale")
    ...     _ = (Path(d) / "other").write_bytes(b"not torch's")
    ...     removed = remove_stale(Path(d))
    ...     removed, sorted(p.name for p in Path(d).iterdir()) == ["other", f"torch_{os.getpid()}_1_1"]
    ({'files': 1, 'bytes': 5}, True)
    """
    removed = {"files": 0, "bytes": 0}
    directory = directory or SHM
    try:
        entries = list(directory.iterdir())
    except OSError:
        return removed
    for path in entries:
        match = TORCH_FILE.match(path.name)
        if not match or _running(int(match.group(1))):
            continue
        try:
            size = path.stat().st_size
            path.unlink()
        except OSError:  # gone meanwhile, or not ours to remove
            continue
        removed["files"] += 1
        removed["bytes"] += size
    if removed["files"]:
        log.info(
            "removed %d shared-memory files (%.0f MB) of earlier trainers' ended processes from %s",
            removed["files"],
            removed["bytes"] / 1e6,
            directory,
        )
    return removed
