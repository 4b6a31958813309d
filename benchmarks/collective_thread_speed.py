"""What a data-parallel rank's training thread computes per CPU second beside its gradient all-reduce.

A ``ddp`` rank of the local cluster trains fewer samples per CPU second of its training thread than a
baseline or a Hivemind peer with the same one thread (the rank's collectives' seconds and CPU left out, as
trainer/loop.py leaves them out). This benchmark runs the rank's step as trainer/strategies/data_parallel.py
does (zero the gradients in place, forward, backward, pack them into one buffer, all-reduce it with gloo,
average, copy back, SGD) in ``--ranks`` processes at once on this host, one torch thread each, in variants
that each leave one part out or change one thing, and prints for each the training thread's CPU per sample
outside the exchange (median over ranks and steps) and its ratio to the variant with no all-reduce at all:

- ``no exchange``: the same processes, the same step, no packing and no all-reduce (the ranks still start
  together and run side by side);
- ``ddp``: the step as the trainer runs it;
- ``ddp, flush denormals``: the same with ``torch.set_flush_denormal(True)`` (subnormal floats as zero);
- ``ddp, gradients set to none``: the gradients freed by ``zero_grad`` as the baseline does, not zeroed;
- ``ddp, no packing``: each gradient all-reduced in place, no flat buffer.

    .venv/bin/python benchmarks/collective_thread_speed.py --ranks 4 --steps 40

Random 3x32x32 batches of ``--batch-size``; torchvision's ResNet18 with 10 classes, the trainer's model. The
ranks are host processes without CPU quotas: what differs between the variants is what the step does, not
the container around it.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time

VARIANTS = {
    "no exchange": {"exchange": False},
    "ddp": {},
    "ddp, flush denormals": {"flush_denormal": True},
    "ddp, gradients set to none": {"set_to_none": True},
    "ddp, no packing": {"packed": False},
}


def rank_main(rank: int, world: int, port: int, steps: int, batch_size: int, options: dict) -> None:
    """One rank: ``steps`` measured steps after 3 warm-up steps; prints its per-step CPU seconds as JSON."""
    import torch
    import torch.distributed as dist
    from torchvision.models import resnet18

    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    if options.get("flush_denormal"):
        torch.set_flush_denormal(True)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = resnet18(num_classes=10)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    generator = torch.Generator().manual_seed(rank)
    parameters = [p for p in model.parameters() if p.requires_grad]
    compute_cpu: list[float] = []
    for step in range(3 + steps):
        images = torch.randn(batch_size, 3, 32, 32, generator=generator)
        labels = torch.randint(0, 10, (batch_size,), generator=generator)
        dist.barrier()  # the ranks step together, as the all-reduce makes them
        started = time.thread_time()
        optimizer.zero_grad(set_to_none=bool(options.get("set_to_none")))
        torch.nn.functional.cross_entropy(model(images), labels).backward()
        exchange_cpu = 0.0
        if options.get("exchange", True):
            exchange_started = time.thread_time()
            if options.get("packed", True):
                flat = torch.cat([p.grad.reshape(-1) for p in parameters])
                dist.all_reduce(flat)
                flat /= world
                offset = 0
                for parameter in parameters:
                    parameter.grad.copy_(flat[offset : offset + parameter.numel()].view_as(parameter.grad))
                    offset += parameter.numel()
                del flat
            else:
                for parameter in parameters:
                    dist.all_reduce(parameter.grad)
                    parameter.grad /= world
            exchange_cpu = time.thread_time() - exchange_started
        optimizer.step()
        if step >= 3:
            compute_cpu.append(time.thread_time() - started - exchange_cpu)
    dist.destroy_process_group()
    print(json.dumps(compute_cpu))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def run_variant(options: dict, args: argparse.Namespace) -> list[float]:
    """Every rank's per-step CPU seconds of its training thread outside the exchange, all ranks pooled."""
    port = free_port()
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE"}
    ranks = [
        subprocess.Popen(
            [sys.executable, __file__, "--rank", str(rank), "--port", str(port), "--ranks", str(args.ranks),
             "--steps", str(args.steps), "--batch-size", str(args.batch_size),
             "--options", json.dumps(options)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment,
        )
        for rank in range(args.ranks)
    ]  # fmt: skip
    pooled: list[float] = []
    for rank in ranks:
        out, err = rank.communicate(timeout=args.timeout)
        if rank.returncode:
            raise SystemExit(f"a rank failed ({options}): {err.strip()[-2000:]}")
        pooled.extend(json.loads(out.strip().splitlines()[-1]))
    return pooled


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds a variant may take")
    parser.add_argument("--only", action="append", choices=list(VARIANTS), help="run these variants only")
    parser.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--options", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank is not None:
        rank_main(args.rank, args.ranks, args.port, args.steps, args.batch_size, json.loads(args.options))
        return
    print(f"{args.ranks} ranks, one thread each, batch {args.batch_size}, {args.steps} steps after 3 warm-up")
    medians: dict[str, float] = {}
    for name, options in VARIANTS.items():
        if args.only and name not in args.only and name != "no exchange":
            continue
        started = time.monotonic()
        per_step = run_variant(options, args)
        medians[name] = statistics.median(per_step) / args.batch_size
        quartiles = statistics.quantiles(per_step, n=4)
        print(
            f"  {name:28s} {medians[name] * 1e3:6.3f} ms CPU a sample (steps' quartiles "
            f"{quartiles[0] / args.batch_size * 1e3:.3f}-{quartiles[2] / args.batch_size * 1e3:.3f}), "
            f"{time.monotonic() - started:.0f} s"
        )
    reference = medians["no exchange"]
    print("ratios to 'no exchange' (CPU a sample, measured in this run):")
    for name, median in medians.items():
        print(f"  {name:28s} {median / reference:.3f}")


if __name__ == "__main__":
    main()
