"""Telemetry overhead: the training loop with and without all telemetry, interleaved in one process.

"With" is ``TrainingLoop.timed_step``: per-step timers, the Prometheus exporter serving on a free port, the
histograms/counters/gauges and the results writer (steps.csv). "Without" is ``TrainingLoop.bare_step``: the
same data, model, forward, backward and optimizer step with no timers and no reporting. Blocks of steps
alternate between the two (the order flips every round) so drifts in machine load hit both alike; the
printed ratio is total instrumented time over total bare time. Target: ≤ 1.01 for resnet18, batch 32.

    python benchmarks/telemetry_overhead.py --model resnet18 --batch-size 32 --rounds 6 --block 10
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch

from experiment.results import ResultsWriter, StepRecord
from trainer.config import RunConfig
from trainer.data import build_loaders
from trainer.loop import LoopLimits, TrainingLoop
from trainer.models import build_model
from trainer.stats import RunStats
from trainer.strategies.baseline import BaselineStrategy
from trainer.telemetry import Telemetry


def build_loops(
    config: RunConfig, results_dir: str
) -> tuple[TrainingLoop, TrainingLoop, Telemetry, ResultsWriter]:
    """Two loops over one model, optimizer and data loader: one fully instrumented, one bare."""
    train_loader, _ = build_loaders(config)
    model = build_model(config.model, seed=config.seed)
    strategy = BaselineStrategy()
    strategy.setup(model, config, on_round=lambda record: None)
    telemetry = Telemetry(run_id="benchmark", peer="local", strategy="baseline")
    telemetry.set_run_info(config)
    telemetry.start_exporter(0, "127.0.0.1")
    writer = ResultsWriter(results_dir)
    writer.start_clock(time.time())
    limits = LoopLimits(max_steps=10**9, log_every=0)
    common = {"model": model, "strategy": strategy, "train_loader": train_loader, "val_loader": None}
    instrumented = TrainingLoop(**common, limits=limits, stats=RunStats(), writer=writer, telemetry=telemetry)
    bare = TrainingLoop(**common, limits=limits, stats=RunStats())
    return instrumented, bare, telemetry, writer


def reporting_cost(telemetry: Telemetry, writer: ResultsWriter, repeats: int = 2000) -> float:
    """Seconds per step spent in what only the instrumented loop does (timers, record, writer, metrics),
    measured in isolation: a load-robust complement to the interleaved ratio."""
    clock = time.perf_counter
    started = clock()
    for index in range(repeats):
        marks = (clock(), clock(), clock(), clock(), time.time())
        record = StepRecord(
            step=index, timestamp=marks[4], wall_seconds=1.0, data_seconds=marks[1] - marks[0],
            compute_seconds=marks[2] - marks[1], optimizer_seconds=marks[3] - marks[2], averaging_seconds=0.0,
            step_seconds=marks[3] - marks[0], samples=32, loss=1.0, hivemind_epoch=0, peers=1,
        )  # fmt: skip
        writer.write_step(record)
        telemetry.observe_step(record, 0)
    return (clock() - started) / repeats


def timed_block(step, count: int) -> float:
    started = time.perf_counter()
    for _ in range(count):
        step()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet18", choices=("resnet18", "smallcnn"))
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1: steadier timings)")
    parser.add_argument("--rounds", type=int, default=6, help="pairs of blocks")
    parser.add_argument("--block", type=int, default=10, help="steps per block")
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    config = RunConfig(model=args.model, batch_size=args.batch_size, vcpus=None).validate()
    with tempfile.TemporaryDirectory(prefix="telemetry-overhead-") as results_dir:
        instrumented, bare, telemetry, writer = build_loops(config, results_dir)
        # share one batch iterator so both variants see the same data stream
        bare.next_batch = instrumented.next_batch  # type: ignore[method-assign]
        timed_block(instrumented.timed_step, args.warmup)
        timed_block(bare.bare_step, args.warmup)
        with_telemetry, without = [], []
        for index in range(args.rounds):
            order = [(instrumented.timed_step, with_telemetry), (bare.bare_step, without)]
            for step, sink in order if index % 2 == 0 else reversed(order):
                sink.append(timed_block(step, args.block))
        per_step_reporting = reporting_cost(telemetry, writer)
        telemetry.stop_exporter()
        writer.close()
    steps = args.rounds * args.block
    ratio = sum(with_telemetry) / sum(without)
    block_ratios = [a / b for a, b in zip(with_telemetry, without, strict=True)]
    print(f"model {args.model}, batch {args.batch_size}, {args.threads} thread(s), {steps} steps per variant")
    print(f"mean step with telemetry    {sum(with_telemetry) / steps * 1000:9.2f} ms")
    print(f"mean step without telemetry {sum(without) / steps * 1000:9.2f} ms")
    print(
        f"per-block ratios: median {statistics.median(block_ratios):.4f}, "
        f"min {min(block_ratios):.4f}, max {max(block_ratios):.4f}"
    )
    bare_step = sum(without) / steps
    print(
        f"reporting per step in isolation {per_step_reporting * 1e6:.1f} us "
        f"= {per_step_reporting / bare_step:.5f} of a bare step"
    )
    print(
        f"overhead ratio (with/without): {ratio:.4f}  target <= 1.01: {'met' if ratio <= 1.01 else 'NOT met'}"
    )
    spread = max(block_ratios) - min(block_ratios)
    if spread > 0.05:
        print(
            f"warning: block ratios spread {spread:.2f}: machine load varies more than the effect measured; "
            "rerun on an idle machine (the isolated reporting cost above does not depend on load)"
        )


if __name__ == "__main__":
    main()
