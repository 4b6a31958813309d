"""A compute calibration of this machine: `trainer calibrate` (trainer/calibrate.py), as a benchmark.

    python benchmarks/thread_scaling.py --out results/thread-scaling.json            # 16 cores, ResNet18
    python benchmarks/thread_scaling.py --threads 1,2 --model smallcnn --batch-sizes 16 --steps 20 \\
        --out /tmp/calibration.json                                                    # CI size

It prints samples/s per process at each thread count (every core busy, every process pinned) and the
speedup over one thread, and writes the calibration file the testbed reads (docs/compute-calibration.md).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trainer.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["calibrate", *sys.argv[1:]]))
