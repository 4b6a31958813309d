"""What every strategy with one torch.distributed rank per host shares (``ddp``, ``zero``, ``fsdp``,
``deepspeed``): the rendezvous that is the start barrier, timeouts, the collective stop, the rounds it
reports and a clean exit.

Rank 0 hosts the rendezvous (``--rendezvous HOST:PORT``, ``--rank``, ``--peers`` is the world size);
the rendezvous is bounded by ``--start-timeout``, every collective after it by ``--averaging-timeout`` (in
this peer's seconds, trainer/dilation.py): a rank that died makes the others fail their next collective
within it (exit reason ``error``, results kept). There is no elastic restart.

The run stops collectively: every step carries a stop flag in a collective (``ddp``/``zero`` in the gradient
all-reduce, the others in a one-element all-reduce of their own), so all ranks stop at the same step (at max
steps, or one step after the first rank reached the target loss).
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import re
import socket
import struct
import time
from typing import TYPE_CHECKING, Any

import torch

from experiment.results import RoundRecord
from trainer.dilation import dilated
from trainer.strategies.base import parameters_fingerprint

if TYPE_CHECKING:
    from trainer.config import RunConfig
    from trainer.strategies.base import RoundSink

log = logging.getLogger(__name__)

#: exit reasons every rank reaches at the same step: a last collective (gathering sharded parameters for the
#: fingerprint) is safe after them, and only after them
AGREED_EXITS = ("max_steps", "target_loss", "collective_finish")


def gloo_interface(rendezvous: str, environ: dict[str, str] | None = None) -> str | None:
    """Point gloo at the interface that reaches rank 0 (``GLOO_SOCKET_IFNAME``), unless it is set; return
    the interface, or None where none is found. Without it gloo binds the address the hostname resolves to,
    and a cloud image maps its hostname to 127.0.1.1 in /etc/hosts: every rank would announce loopback.

    >>> gloo_interface("127.0.0.1:29500", environ={})
    'lo'
    >>> gloo_interface("127.0.0.1:29500", environ={"GLOO_SOCKET_IFNAME": "eth1"})
    'eth1'
    """
    environ = os.environ if environ is None else environ
    if environ.get("GLOO_SOCKET_IFNAME"):
        return environ["GLOO_SOCKET_IFNAME"]
    host, _, port = rendezvous.rpartition(":")
    try:
        address = route_address(host, int(port))
    except (OSError, ValueError):
        return None
    interface = interface_of(address)
    if interface:
        environ["GLOO_SOCKET_IFNAME"] = interface
    return interface


def route_address(host: str, port: int) -> str:
    """The local address packets to ``host:port`` leave from (no packet is sent).

    >>> route_address("127.0.0.1", 29510)
    '127.0.0.1'
    """
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((host, port))
        return str(probe.getsockname()[0])


def interface_of(address: str) -> str | None:
    """The name of the interface holding the IPv4 ``address`` (SIOCGIFADDR on each), or None.

    >>> interface_of("127.0.0.1")
    'lo'
    """
    import fcntl

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        for _, name in socket.if_nameindex():
            request = struct.pack("256s", name.encode()[:15])
            try:
                reply = fcntl.ioctl(probe.fileno(), 0x8915, request)  # SIOCGIFADDR
            except OSError:
                continue  # no IPv4 address on it
            if socket.inet_ntoa(reply[20:24]) == address:
                return name
    return None


def rendezvous_error(
    rendezvous: str, rank: int, world_size: int, timeout: float, waited: float, error: str
) -> TimeoutError | ConnectionError:
    """What a failed rendezvous says: a timeout only where the timeout elapsed; else what failed, after how
    long, and where a rank announced a loopback address, that.

    >>> str(rendezvous_error("10.0.0.1:29500", 1, 2, 300, 300.2, "timed out\\nmore"))
    'rendezvous at 10.0.0.1:29500 did not complete within 300s (rank 1 of 2): timed out'
    >>> error = rendezvous_error("10.0.0.1:29500", 1, 2, 300, 6.1, "failed to connect remote=[127.0.1.1]:5")
    >>> type(error).__name__, str(error)[:75]
    ('ConnectionError', 'rendezvous at 10.0.0.1:29500 failed after 6.1 s of its 300s (rank 1 of 2): ')
    >>> "a rank announced a loopback address" in str(error)
    True
    """
    first = (error.splitlines() or [""])[0]
    where = f"rendezvous at {rendezvous}"
    ranks = f"(rank {rank} of {world_size})"
    if waited >= 0.9 * timeout:
        return TimeoutError(f"{where} did not complete within {timeout:g}s {ranks}: {first}")
    message = f"{where} failed after {waited:.1f} s of its {timeout:g}s {ranks}: {first}"
    if re.search(r"\b127\.\d+\.\d+\.\d+", first) and not rendezvous.startswith("127."):
        message += (
            "; a rank announced a loopback address: its host name resolves to loopback (/etc/hosts) and gloo"
            " was not given the cluster interface (GLOO_SOCKET_IFNAME)"
        )
    return ConnectionError(message)


class CollectiveStrategy:
    """One rank of a synchronous run (see the module docstring); subclasses build the optimizer in
    :meth:`_after_rendezvous` and define :meth:`step`."""

    finishes_collectively = True
    name = "collective"

    def __init__(self) -> None:
        self.config: RunConfig | None = None
        self.model: torch.nn.Module | None = None
        self.optimizer: Any = None
        self.group: Any = None
        self._on_round: RoundSink | None = None
        self._steps = 0
        self._own_reason: str | None = None
        self._stop_agreed = False
        self._stop_reason: str | None = None
        self._details: dict[str, Any] = {}

    # ------------------------------------------------------------------ setup and start

    def setup(self, model: torch.nn.Module, config: RunConfig, on_round: RoundSink) -> None:
        self.model, self.config, self._on_round = model, config, on_round
        self._details.update(rank=config.rank, world_size=config.peers, rendezvous=config.rendezvous)

    def wait_for_start(self) -> float:
        """The rendezvous at rank 0 (the start barrier), then the same initial parameters on every rank and
        the strategy's own preparation."""
        import torch.distributed as dist

        config, model = self._config(), self._model()
        started = time.monotonic()
        interface = gloo_interface(config.rendezvous)
        if interface:
            self._details["gloo_interface"] = interface
        host, _, port = config.rendezvous.rpartition(":")
        with contextlib.suppress(OSError, ValueError):  # the address this rank reaches rank 0 from
            self._details["gloo_address"] = route_address(host, int(port))
        try:
            dist.init_process_group(
                "gloo",
                init_method=f"tcp://{config.rendezvous}",
                rank=config.rank,
                world_size=config.peers,
                timeout=datetime.timedelta(seconds=config.start_timeout),
            )
        except (RuntimeError, ValueError) as exc:  # the store's connect timeout, refused rendezvous
            raise rendezvous_error(
                config.rendezvous,
                config.rank,
                config.peers,
                config.start_timeout,
                time.monotonic() - started,
                str(exc),
            ) from exc
        ranks = list(range(config.peers))
        self.group = dist.new_group(ranks, timeout=self.collective_timeout())
        with torch.no_grad():
            for parameter in model.parameters():
                dist.broadcast(parameter.data, src=0, group=self.group)
        self._after_rendezvous()
        dist.barrier(group=self.group)
        waited = time.monotonic() - started
        log.info("rendezvous complete: rank %d of %d after %.1f s", config.rank, config.peers, waited)
        return waited

    def collective_timeout(self) -> datetime.timedelta:
        return datetime.timedelta(seconds=dilated(self._config()).averaging_timeout)

    def _after_rendezvous(self) -> None:
        """Build the optimizer (and wrap the model) once every rank holds the same parameters."""
        raise NotImplementedError

    # ------------------------------------------------------------------ the loop's side

    def training_module(self) -> torch.nn.Module:
        """The module the loop calls forward on (the model itself, sharded in place by FSDP)."""
        return self._model()

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def zero_grad(self) -> None:
        # freed, as the baseline, torch's default and the calibration's probe do: zeroed in place, backward
        # adds into them, and a ResNet18 rank's training thread takes about 1.3x the CPU a sample
        # (`python benchmarks/collective_thread_speed.py --ranks 4` measures the two)
        self._ready().zero_grad(set_to_none=True)

    def _wants_stop(self) -> bool:
        return self._own_reason is not None or self._steps + 1 >= self._config().max_steps

    def _agree_on_stop(self) -> float:
        """A one-element all-reduce of the stop flag (for strategies whose step has no all-reduce of its own
        to carry it); returns its seconds."""
        import torch.distributed as dist

        flag = torch.tensor([float(self._wants_stop())])
        started = time.perf_counter()
        dist.all_reduce(flag, group=self.group)
        self._stop_agreed = self._stop_agreed or bool(flag[0] > 0)
        return time.perf_counter() - started

    def _report(self, kind: str, seconds: float) -> None:
        if self._on_round is None:
            return
        self._on_round(
            RoundRecord(
                timestamp=time.time(),
                epoch=self._steps,
                kind=kind,
                outcome="ok",
                group_size=self._config().peers,
                matchmaking_seconds=0.0,
                allreduce_seconds=seconds,
                blocking_seconds=seconds,
                received_share=1.0,  # a collective of every rank: it returns all of the result or fails
            )
        )

    # ------------------------------------------------------------------ the collective finish

    def request_stop(self, reason: str) -> None:
        if self._own_reason is None:
            self._own_reason = reason

    def stop_reason(self) -> str | None:
        if self._stop_reason is None and self._stop_agreed:
            self._stop_reason = self._own_reason or "collective_finish"
        return self._stop_reason

    def finish(self, exit_reason: str) -> None:
        import torch.distributed as dist

        if self.optimizer is not None:
            self._details.update(self._fingerprint(exit_reason))
        if dist.is_initialized():
            # after an error another rank may never come: no barrier, just leave
            dist.destroy_process_group()
        self._details["exit_reason"] = exit_reason

    def _fingerprint(self, exit_reason: str) -> dict[str, Any]:
        """The final parameters (trainer/strategies/baseline.py); sharding strategies gather them first, which
        is a collective: only after an exit every rank agreed on."""
        return parameters_fingerprint(self._model())

    def summary_details(self) -> dict[str, Any]:
        return dict(self._details)

    def local_optimizer(self) -> torch.optim.Optimizer | None:
        return self.optimizer

    def process_roles(self) -> dict[int, str]:
        return {}

    # ------------------------------------------------------------------ helpers

    def _config(self) -> RunConfig:
        if self.config is None:
            raise RuntimeError(f"{self.name}: setup(model, config, on_round) must be called first")
        return self.config

    def _model(self) -> torch.nn.Module:
        if self.model is None:
            raise RuntimeError(f"{self.name}: setup(model, config, on_round) must be called first")
        return self.model

    def _ready(self) -> Any:
        if self.optimizer is None:
            raise RuntimeError(f"{self.name}: wait_for_start() must complete first")
        return self.optimizer
