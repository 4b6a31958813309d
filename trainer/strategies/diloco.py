"""DiLoCo with torchft (``diloco``): each peer trains alone for ``sync_every`` (H) steps with the run's
optimizer (the inner one), then the peers average their parameter deltas (pseudo-gradients) and apply them
with an outer Nesterov SGD (Douillard et al., arXiv 2311.08105).

One torchft replica group of one rank per peer, over gloo. Its coordinator, torchft's Lighthouse, runs on
the monitor host (roles/torchft_lighthouse, ``--lighthouse HOST:PORT``). Every sync asks the Lighthouse for a
quorum of the replicas alive now: a peer that died is dropped from it (after the Lighthouse's heartbeat
timeout) and the others go on without it. The quorum's size is the step's ``peers`` (the exporter's peers
gauge); a sync that could not commit (a member failed during it) leaves the parameters at the last commit.

What it shares with ``ddp`` and the other collectives (trainer/strategies/collective.py): the rendezvous at
rank 0 is the start barrier, and every rank starts from rank 0's parameters; that process group is left
after it, so a dead peer never blocks the others. The run stops at max steps on every peer (they count the
same steps), or at the sync after a peer reached the target loss (a one-element all-reduce in the sync's
quorum carries the flag).

Each sync is one ``parameters`` row in rounds.csv: ``matchmaking_seconds`` is the quorum,
``allreduce_seconds`` the all-reduce of the pseudo-gradients and the outer step, ``outcome`` ``failed`` with
its cause when it did not commit. The sync's whole time is the step's averaging time.

Every replica advertises its cluster address: the one its route to the Lighthouse leaves from. Its TCPStore,
manager server and checkpoint server listen on ephemeral ports (the firewall opens the range for gloo).

A restarted replica (``rejoining``: a restart fault or churn, docs/faults.md) skips the rendezvous, which the
others left long ago, and joins the next quorum as a replica at step 0: torchft heals it there from a peer's
checkpoint (the model, the inner optimizer and DiLoCo's copy of the parameters and outer optimizer). The
download is timed and its bytes counted (``on_rejoined``).
"""

from __future__ import annotations

import datetime
import logging
import socket
import time
from typing import Any

import torch

from experiment.results import RoundRecord
from experiment.variables import DEFAULT_OUTER_LEARNING_RATE, DEFAULT_OUTER_MOMENTUM, DEFAULT_SYNC_EVERY
from trainer.dilation import Dilation, dilated
from trainer.strategies.base import StepOutcome, build_optimizer
from trainer.strategies.collective import CollectiveStrategy, route_address

log = logging.getLogger(__name__)

#: seconds between a replica's heartbeats to the Lighthouse (torchft's default), dilated like every timer
HEARTBEAT_SECONDS = 0.1


class DiLoCoStrategy(CollectiveStrategy):
    """One DiLoCo replica (see the module docstring)."""

    name = "diloco"

    def __init__(self) -> None:
        super().__init__()
        self.manager: Any = None
        self.diloco: Any = None
        self.outer_optimizer: torch.optim.Optimizer | None = None
        self._since_sync = 0
        self._quorum_seconds = 0.0
        self._inner_done_at = 0.0
        self._syncs = {"ok": 0, "failed": 0}
        self._smallest_quorum: int | None = None
        self._gradient_bytes = 0
        #: set by the runner before setup when this start is a restart of a killed trainer
        self.rejoining = False
        self.on_rejoined: Any = None
        self._rejoin_started = 0.0

    @property
    def sync_every(self) -> int:
        return self._config().sync_every or DEFAULT_SYNC_EVERY

    # ------------------------------------------------------------------ start

    def wait_for_start(self) -> float:
        """The collectives' start barrier (the same parameters everywhere), then the replica on its own."""
        import torch.distributed as dist

        if self.rejoining:  # the others left the rendezvous long ago: straight to the next quorum
            self._rejoin_started = time.monotonic()
            self._after_rendezvous()
            log.info("rejoining: the next sync's quorum heals this replica from a peer")
            return time.monotonic() - self._rejoin_started
        waited = super().wait_for_start()
        dist.destroy_process_group()
        return waited

    def _after_rendezvous(self) -> None:
        from torchft.checkpointing.http_transport import HTTPTransport
        from torchft.local_sgd import DiLoCo
        from torchft.manager import Manager
        from torchft.process_group import ProcessGroupGloo

        config, model = self._config(), self._model()
        for quiet in ("torchft_commits", "torchft_quorums", "torchft_errors"):  # empty lines meant for OTel
            logging.getLogger(quiet).setLevel(logging.WARNING)
        times = dilated(config)
        lighthouse_host, _, lighthouse_port = (config.lighthouse or "").rpartition(":")
        address = route_address(lighthouse_host, int(lighthouse_port))
        timeout = datetime.timedelta(seconds=times.averaging_timeout)

        strategy = self

        class ClusterTransport(HTTPTransport):
            """torchft's checkpoint server, advertised at the cluster address instead of the host name; a
            checkpoint received (this replica healed) is timed and counted."""

            def address(self) -> str:
                return super().address().replace(f"//{socket.gethostname()}:", f"//{address}:", 1)

            def recv_checkpoint(self, *args: Any, **kwargs: Any) -> Any:
                started = time.monotonic()
                state = super().recv_checkpoint(*args, **kwargs)
                strategy._healed(time.monotonic() - started, state)
                return state

        self.optimizer = build_optimizer(config.optimizer, model.parameters(), config.learning_rate)
        self.outer_optimizer = torch.optim.SGD(
            model.parameters(),
            lr=config.outer_learning_rate or DEFAULT_OUTER_LEARNING_RATE,
            momentum=DEFAULT_OUTER_MOMENTUM if config.outer_momentum is None else config.outer_momentum,
            nesterov=True,
        )
        self._store = dist_store(address)
        self.manager = Manager(
            pg=ProcessGroupGloo(timeout=timeout),
            load_state_dict=self._load_state,
            state_dict=self._state,
            min_replica_size=1,
            use_async_quorum=False,  # DiLoCo's requirement: the quorum before the sync, not during the step
            timeout=timeout,
            # a quorum waits for the slowest replica's H steps, at most the Lighthouse's join timeout
            quorum_timeout=2 * timeout,
            connect_timeout=datetime.timedelta(seconds=config.start_timeout),
            rank=0,
            world_size=1,
            store_addr=address,
            store_port=self._store.port,
            lighthouse_addr=f"http://{config.lighthouse}",
            replica_id=config.resolved_peer_id,
            port=0,
            hostname=address,
            heartbeat_interval=datetime.timedelta(seconds=Dilation.of(config).seconds(HEARTBEAT_SECONDS)),
            checkpoint_transport=ClusterTransport(timeout=timeout, num_chunks=0),
            init_sync=False,  # every replica starts from rank 0's parameters (the rendezvous)
        )
        self._timed_quorum()
        # the end of the inner step, before DiLoCo's own post-hook (hooks run in the order registered)
        self.optimizer.register_step_post_hook(self._inner_step_done)
        self.diloco = DiLoCo(self.manager, [model], self.optimizer, self.outer_optimizer, self.sync_every)
        self.diloco.__enter__()
        self._details.update(
            sync_every=self.sync_every,
            outer_learning_rate=self.outer_optimizer.defaults["lr"],
            outer_momentum=self.outer_optimizer.defaults["momentum"],
            lighthouse=config.lighthouse,
            advertised_address=address,
        )

    def _timed_quorum(self) -> None:
        """Time every quorum DiLoCo asks the manager for (the sync's matchmaking)."""
        start_quorum = self.manager.start_quorum

        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return start_quorum(*args, **kwargs)
            finally:
                self._quorum_seconds += time.perf_counter() - started

        self.manager.start_quorum = timed

    def _healed(self, seconds: float, state: Any) -> None:
        """torchft healed this replica from a peer: a restarted one has rejoined."""
        from trainer.memory import tensor_bytes

        cost = {
            "state_download_seconds": round(seconds, 3),
            "state_download_bytes": tensor_bytes(_tensors(state)),
            "epoch_before": 0,
            "progress_wait_seconds": round(time.monotonic() - self._rejoin_started - seconds, 3),
        }
        log.info("healed from a peer in %.2f s (%d bytes)", seconds, cost["state_download_bytes"])
        self._details.setdefault("heals", 0)
        self._details["heals"] += 1
        if self.rejoining and "rejoin" not in self._details:
            self._details["rejoin"] = cost
            if self.on_rejoined is not None:
                self.on_rejoined(cost)

    def _inner_step_done(self, *_: Any) -> None:
        self._inner_done_at = time.perf_counter()

    def _state(self) -> dict[str, Any]:
        return {"model": self._model().state_dict(), "inner": self._ready().state_dict()}

    def _load_state(self, state: dict[str, Any]) -> None:
        self._model().load_state_dict(state["model"])
        self._ready().load_state_dict(state["inner"])

    # ------------------------------------------------------------------ the loop's side

    def zero_grad(self) -> None:
        self._ready().zero_grad(set_to_none=True)

    def step(self, batch_size: int) -> StepOutcome:
        """The inner step; every H-th also the sync (quorum, all-reduce of the deltas, outer step)."""
        manager = self.manager
        committed_before = manager.current_step()
        if not self._gradient_bytes:  # the inner step's gradients (the outer step frees them at every sync)
            from trainer.memory import tensor_bytes

            grads = (p.grad for p in self._model().parameters() if p.grad is not None)
            self._gradient_bytes = tensor_bytes(grads)
        self._quorum_seconds = 0.0
        self._ready().step()  # DiLoCo's post-hook syncs every H-th step
        ended = time.perf_counter()
        self._steps += 1
        self._since_sync += 1
        if self._since_sync < self.sync_every:
            return StepOutcome(hivemind_epoch=committed_before, peers=self._last_quorum())
        self._since_sync = 0
        sync_seconds = ended - self._inner_done_at
        committed = manager.current_step() > committed_before
        quorum = manager.num_participants()
        smallest = self._smallest_quorum
        self._smallest_quorum = quorum if smallest is None else min(quorum, smallest)
        flag_seconds = self._agree_on_stop_in_quorum() if committed else 0.0
        self._syncs["ok" if committed else "failed"] += 1
        error = manager.errored()
        if self._on_round is not None:
            self._on_round(
                RoundRecord(
                    timestamp=time.time(),
                    epoch=manager.current_step(),
                    kind="parameters",
                    outcome="ok" if committed else "failed",
                    group_size=quorum or None,
                    matchmaking_seconds=self._quorum_seconds,
                    allreduce_seconds=max(0.0, sync_seconds - self._quorum_seconds) + flag_seconds,
                    blocking_seconds=sync_seconds + flag_seconds,
                    error=None if committed else _short(error) or "the quorum did not commit",
                    received_share=1.0 if committed else None,
                )
            )
        return StepOutcome(
            averaging_seconds=sync_seconds + flag_seconds, hivemind_epoch=manager.current_step(), peers=quorum
        )

    def _last_quorum(self) -> int:
        return self.manager.num_participants() or 1

    def _agree_on_stop_in_quorum(self) -> float:
        """The stop flag, summed over this sync's quorum; returns its seconds."""
        from torch.distributed import ReduceOp

        flag = torch.tensor([float(self._own_reason is not None)])
        started = time.perf_counter()
        self.manager.allreduce(flag, reduce_op=ReduceOp.SUM).wait()
        self._stop_agreed = self._stop_agreed or bool(flag[0] > 0)
        return time.perf_counter() - started

    def request_stop(self, reason: str) -> None:
        """Max steps ends every replica at once (they count the same steps); the target loss at the next
        sync, with the others."""
        super().request_stop(reason)
        if reason == "max_steps":
            self._stop_agreed = True

    # ------------------------------------------------------------------ the end

    def finish(self, exit_reason: str) -> None:
        if self.diloco is not None:
            self.diloco.__exit__(None, None, None)
        if self.optimizer is not None:
            self._details.update(self._fingerprint(exit_reason))
        if self.manager is not None:
            self.manager.shutdown(wait=False)
        self._details.update(
            exit_reason=exit_reason,
            syncs_committed=self._syncs["ok"],
            syncs_failed=self._syncs["failed"],
            smallest_quorum=self._smallest_quorum,
        )

    def held_bytes(self) -> dict[str, int]:
        """The model's parameters and DiLoCo's copy of them at the last sync; the inner and outer optimizers'
        state (the outer one's Nesterov momentum is one more copy of the model)."""
        from trainer.memory import model_bytes, optimizer_state_bytes, tensor_bytes

        sizes = model_bytes(self._model())
        sizes["gradients"] = max(sizes["gradients"], self._gradient_bytes)
        if self.diloco is not None:
            for fragment in self.diloco._fragments:
                sizes["parameters"] += tensor_bytes(fragment.original_parameters.values())
        if self.outer_optimizer is not None and self.optimizer is not None:
            sizes["optimizer_state"] = optimizer_state_bytes(self.optimizer) + optimizer_state_bytes(
                self.outer_optimizer
            )
        return sizes


def dist_store(address: str) -> Any:
    """This replica's own TCPStore (torchft's manager keys, and the quorum's process group when this replica
    is the quorum's first), on an ephemeral port of its cluster address."""
    from torch.distributed import TCPStore

    return TCPStore(address, 0, is_master=True, wait_for_workers=False)


def _tensors(state: Any) -> list[torch.Tensor]:
    """Every tensor in a (nested) state dict."""
    if isinstance(state, torch.Tensor):
        return [state]
    if isinstance(state, dict):
        return [t for value in state.values() for t in _tensors(value)]
    if isinstance(state, (list, tuple)):
        return [t for value in state for t in _tensors(value)]
    return []


def _short(error: Any) -> str:
    return " ".join(str(getattr(error, "original_exception", error) or "").split())[:200]
