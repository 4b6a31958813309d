"""benchmarks/busy_by_test.py: a pytest run whose test starts a process is recorded under that test's name."""

from __future__ import annotations

import doctest
import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks import busy_by_test  # noqa: E402

SCRIPT = Path(busy_by_test.__file__)


def test_segments_doctest():
    result = doctest.testmod(busy_by_test)
    assert result.attempted > 0 and result.failed == 0


# slow: it times its samples (one every 0.5 s across a 3 s child), so it runs in the serial pass; beside the
# first phase's Molecule scenarios, with both cores busy, the sampler took 2 samples in those 3 s
@pytest.mark.slow
def test_a_test_that_starts_a_process_is_named_while_it_runs(tmp_path):
    # a test that busies a child process for 3 s, then one that does nothing in a process of its own
    (tmp_path / "test_busy.py").write_text(
        "import subprocess, sys\n"
        "def test_spins():\n"
        "    subprocess.run([sys.executable, '-c', 'import time\\nend = time.time() + 3\\n"
        "while time.time() < end: pass'], check=True)\n"
        "def test_idle():\n"
        "    pass\n"
    )
    out = tmp_path / "profile.jsonl"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path / "test_busy.py")]
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(out), "--every", "0.5", "--shortest", "0", "--", *command],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    samples = [json.loads(line) for line in out.read_text().splitlines()]
    named = [s for s in samples if any(t.endswith("test_busy.py::test_spins") for t in s["tests"])]
    # the child ran 3 s: most of its samples name it, and it kept about a core busy
    assert len(named) >= 3, samples
    assert max(s["busy"] for s in named) > 0.5, named
    assert not any(t.endswith("::test_idle") for s in samples for t in s["tests"])  # it started nothing
    assert "test_spins" in done.stdout and "cores busy on average" in done.stdout, done.stdout
