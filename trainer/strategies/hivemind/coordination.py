"""Fair Hivemind runs: a start barrier and a collective finish, agreed through the run's DHT.

Four run-scoped DHT keys, one subkey per peer (``<peer name>/<DHT peer id>``):

- ``<run_id>_barrier``: a peer announces itself once it joined the DHT and holds the model state; every peer
  waits until ``peers`` announced (bounded by ``start_timeout``) before its first step;
- ``<run_id>_synced``: after its first step a peer announces itself once its progress tracker counts every
  expected peer, and waits until all did (bounded), so no peer runs ahead thinking it is alone;
- ``<run_id>_stop``: the first peer whose own stop condition holds (max steps, target loss) publishes the
  epoch at which everybody stops: the next epoch boundary. Every peer stops when its Hivemind epoch reaches
  the smallest published stop epoch, so the last averaging round has every peer in it;
- ``<run_id>_done``: a peer that stopped announces it, and waits (bounded) until the others did, serving
  averaging and state downloads meanwhile, before it shuts its DHT down.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

#: how long announcements live in the DHT (a run's keys never need to outlive it by much)
ENTRY_LIFETIME_SECONDS = 24 * 3600.0
#: seconds between the background reads of the stop key while training. Only an early notice: every epoch
#: update reads it fresh (read_stop), and the stop is always at an epoch boundary. A DHT read costs every peer
#: CPU (8 DHTs on 2 cores: ~9 ms of DHT and p2pd CPU per read, summed over the peers); at one read per
#: 0.5 s step that was ~8 % of a 0.22-core peer's CPU in `make demo` (docs/fair-cpu.md).
STOP_POLL_SECONDS = 2.0


@dataclass(frozen=True)
class StopRequest:
    epoch: int
    reason: str
    peer: str


class RunCoordinator:
    """Start barrier and collective finish for one peer of a Hivemind run.

    :param dht: the peer's running ``hivemind.DHT``
    :param run_id: the run's id (the DHT key prefix shared with ``hivemind.Optimizer``)
    :param peer_name: this peer's name (``--peer-id``), used in messages
    :param peers: peers that must announce themselves before anyone starts
    :param poll_interval: seconds between DHT reads while waiting
    :param stop_poll_interval: seconds between the background reads of the stop key while training
    """

    def __init__(
        self,
        dht: Any,
        run_id: str,
        peer_name: str,
        *,
        peers: int,
        poll_interval: float = 0.2,
        stop_poll_interval: float = STOP_POLL_SECONDS,
    ):
        self.dht = dht
        self.run_id = run_id
        self.peer_name = peer_name
        self.subkey = f"{peer_name}/{dht.peer_id.to_base58()}"
        self.peers = peers
        self.poll_interval = poll_interval
        self.stop_poll_interval = stop_poll_interval
        self.barrier_key = f"{run_id}_barrier"
        self.stop_key = f"{run_id}_stop"
        self.done_key = f"{run_id}_done"
        self.synced_key = f"{run_id}_synced"
        self.release_key = f"{run_id}_release"  # a min_peers release, recorded by the peer that made it
        self.released_at: float | None = None  # Unix time the barrier let this peer go
        #: peers the run started with: peers, or fewer when min_peers let it start without some
        self.started_with = peers
        self._stop: StopRequest | None = None
        self._pending_stop_read: Any = None
        self._last_stop_read = 0.0

    # ------------------------------------------------------------------ DHT helpers

    def _store(self, key: str, value: Any) -> bool:
        from hivemind.utils import get_dht_time

        return bool(
            self.dht.store(
                key, subkey=self.subkey, value=value, expiration_time=get_dht_time() + ENTRY_LIFETIME_SECONDS
            )
        )

    def _entries(self, key: str) -> dict[str, Any]:
        found = self.dht.get(key, latest=True)
        return _unwrap(found)

    # ------------------------------------------------------------------ start barrier

    def wait_for_peers(self, timeout: float, min_peers: int = 0) -> float:
        """Announce this peer, wait until ``peers`` did; return the seconds waited.

        When ``timeout`` passes first: with ``min_peers`` > 0 and at least that many arrived, they start
        without the others (``self.started_with`` says how many); else raises TimeoutError naming how many
        (and which) peers arrived. Such a release is the run's, not this peer's alone: the first peer whose
        timeout passes records it in the DHT, and every peer still waiting starts with it then, instead of
        at its own timeout (the peers start a few seconds apart, the bootstrap peer first; each waiting out
        its own timeout let the first train alone for that long).
        """
        started = time.monotonic()
        deadline = started + timeout
        announced_at = 0.0
        arrived: dict[str, Any] = {}
        while True:
            now = time.monotonic()
            if now - announced_at > 10.0 or self.subkey not in arrived:
                self._store(self.barrier_key, {"peer": self.peer_name, "time": time.time()})
                announced_at = now
            arrived = self._entries(self.barrier_key)
            if len(_names(arrived)) >= self.peers:  # a restarted peer's earlier entry counts once
                break
            released_by = self._released_by_another() if min_peers > 0 else None
            if released_by is not None:
                log.warning(
                    "start barrier released by %s without the others (min_peers %d): starting with %s",
                    released_by["peer"], min_peers, ", ".join(released_by["peers"]),
                )  # fmt: skip
                arrived = {str(name): {"peer": name} for name in released_by["peers"]}
                break
            if time.monotonic() >= deadline:
                names = sorted(_names(arrived))
                if 0 < min_peers <= len(names):
                    log.warning(
                        "start barrier timed out after %gs with %d of %d expected peers (%s): starting "
                        "without the others (min_peers %d)", timeout, len(names), self.peers,
                        ", ".join(names), min_peers,
                    )  # fmt: skip
                    self._store(self.release_key, {"peer": self.peer_name, "peers": names})
                    break
                raise TimeoutError(
                    f"start barrier timed out after {timeout:g}s: {len(names)} of {self.peers} "
                    f"expected peers arrived ({', '.join(names) or 'none'})"
                )
            time.sleep(self.poll_interval)
        self.released_at = time.time()
        self.started_with = min(len(_names(arrived)), self.peers)
        waited = time.monotonic() - started
        log.info("start barrier released after %.2fs: %d peers arrived", waited, len(_names(arrived)))
        return waited

    def _released_by_another(self) -> dict[str, Any] | None:
        """The release another peer recorded when its timeout passed with min_peers arrived, if any."""
        entries = _as_dicts(self._entries(self.release_key))
        releases = [e for key, e in entries.items() if key != self.subkey and e.get("peers")]
        return min(releases, key=lambda e: len(e["peers"])) if releases else None

    def wait_for_synced(self, counts_everyone: Callable[[], bool], timeout: float) -> float:
        """Announce once ``counts_everyone()`` holds, wait until every expected peer did; the seconds waited.

        Bounded by ``timeout``: then it logs a warning and returns (the run goes on, unsynchronized).
        """
        started = time.monotonic()
        announced, last_read = False, 0.0
        while True:
            now = time.monotonic()
            if not announced and counts_everyone():
                self._store(self.synced_key, {"peer": self.peer_name, "time": time.time()})
                announced = True
            if announced and now - last_read >= self.poll_interval:
                last_read = now
                if len(self._entries(self.synced_key)) >= self.started_with:
                    break
            if now - started >= timeout:
                log.warning(
                    "progress trackers not in sync after %.0fs (%s): going on anyway",
                    timeout,
                    "the others' trackers lag" if announced else "ours does not count every peer",
                )
                break
            time.sleep(0.05)
        return time.monotonic() - started

    # ------------------------------------------------------------------ collective finish

    def request_stop(self, epoch: int, reason: str) -> None:
        """Publish that everybody stops when their epoch reaches ``epoch`` (the smallest request wins)."""
        self._store(self.stop_key, {"epoch": int(epoch), "reason": reason, "peer": self.peer_name})
        self._merge_stop(StopRequest(int(epoch), reason, self.peer_name))
        log.info("requested a collective stop at epoch %d (%s)", epoch, reason)

    def poll_stop(self) -> StopRequest | None:
        """The agreed stop request so far; refreshes it from the DHT in the background (never blocks)."""
        future = self._pending_stop_read
        if future is not None and future.done():
            self._pending_stop_read = None
            try:
                self._merge_stop_entries(future.result())
            except Exception as exc:  # a failed read is retried at the next poll
                log.debug("reading the stop key failed: %r", exc)
        now = time.monotonic()
        if self._pending_stop_read is None and now - self._last_stop_read >= self.stop_poll_interval:
            self._last_stop_read = now
            self._pending_stop_read = self.dht.get(self.stop_key, latest=True, return_future=True)
        return self._stop

    def read_stop(self, timeout: float) -> StopRequest | None:
        """The agreed stop request, read from the DHT now (at most ``timeout`` s; the last known one if the
        read fails). Called before each epoch update: a background poll issued before a blocking averaging
        round may not have returned yet when the next epoch comes due, and a peer that passes the stop epoch
        unaware averages alone until its rounds time out (seen with epochs of a few steps)."""
        try:
            self._merge_stop_entries(
                self.dht.get(self.stop_key, latest=True, return_future=True).result(timeout)
            )
        except Exception as exc:  # logged: a peer that misses a stop request may average alone at it
            log.warning("reading the stop key failed (%r); the last known stop: %s", exc, self._stop)
        return self._stop

    def _merge_stop_entries(self, found: Any) -> None:
        for entry in _as_dicts(_unwrap(found)).values():
            if "epoch" in entry:
                self._merge_stop(
                    StopRequest(int(entry["epoch"]), str(entry.get("reason")), str(entry.get("peer")))
                )

    def _merge_stop(self, request: StopRequest) -> None:
        if self._stop is None or request.epoch < self._stop.epoch:
            self._stop = request

    @property
    def stop(self) -> StopRequest | None:
        return self._stop

    def announce_done(self, reason: str, epoch: int) -> None:
        self._store(
            self.done_key,
            {"peer": self.peer_name, "reason": reason, "epoch": int(epoch), "time": time.time()},
        )

    def others_done(self) -> bool:
        """Whether every other peer the run started with has announced it is done (one DHT read)."""
        done = _names(self._entries(self.done_key)) - {self.peer_name}
        return len(done) >= self.started_with - 1

    def wait_for_others_done(self, timeout: float) -> tuple[float, int, int]:
        """Wait until every peer that passed the barrier announced it is done, at most ``timeout`` seconds.

        Returns (seconds waited, peers done, peers expected).
        """
        started = time.monotonic()
        # by peer name: a restarted peer announces itself again under a new DHT identity
        expected = max(self.started_with, len(_names(self._entries(self.barrier_key))))
        done: set[str] = set()
        while True:
            done = _names(self._entries(self.done_key))
            if len(done) >= expected or time.monotonic() - started >= timeout:
                break
            time.sleep(max(self.poll_interval, 0.5))
        return time.monotonic() - started, len(done), expected


def _unwrap(found: Any) -> dict[str, Any]:
    """A DHT ``get`` result for a key with subkeys as {subkey: value}."""
    if found is None:
        return {}
    value = getattr(found, "value", found)
    if not isinstance(value, dict):
        return {}
    return {str(subkey): getattr(item, "value", item) for subkey, item in value.items()}


def _as_dicts(entries: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {key: value for key, value in entries.items() if isinstance(value, dict)}


def _names(entries: dict[str, Any]) -> set[str]:
    """The peer names of a key's entries (subkeys are ``<peer name>/<DHT peer id>``)."""
    return {str(value.get("peer", key)) if isinstance(value, dict) else key for key, value in entries.items()}
