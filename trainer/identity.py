"""``trainer identity PATH``: this host's Hivemind identity, created once, and its peer ID.

A Hivemind peer's ID is the hash of its private key. Hivemind makes a new key for every peer unless it is
given one (``identity_path``), so a bootstrap peer's address is known only once it is up. With a key made
ahead of time, the playbook knows the bootstrap peer's full multiaddr before any peer starts and starts every
peer at once (the others retry their join until it listens: ``_join_dht`` in
trainer/strategies/hivemind/strategy.py).

Prints one JSON line: ``{"path": ..., "peer_id": ..., "created": true|false}``. A key that exists is only
read. Its peer ID is kept beside it (``PATH.peer-id``: the ID and the sha256 of the key it came from), so that
a later call answers without importing Hivemind (about 4 s of CPU on a small VM or container); a key replaced
by another one is derived again.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

HELP = "this host's Hivemind identity: create the key once, print its peer ID"


def peer_id(path: Path) -> tuple[str, bool]:
    """(the base58 peer ID of the key at ``path``, whether it was created now)."""
    created = not path.exists()
    if not created:
        known = _remembered(path)
        if known:
            return known, False
    from hivemind.p2p import P2P, PeerID

    if created:
        path.parent.mkdir(parents=True, exist_ok=True)
        P2P.generate_identity(str(path))  # RSA, written 0400: the same key format p2pd reads
    found = PeerID.from_identity(path.read_bytes()).to_base58()
    _remember_file(path).write_text(json.dumps({"peer_id": found, "key_sha256": _digest(path)}) + "\n")
    return found, created


def _remember_file(path: Path) -> Path:
    return path.with_name(path.name + ".peer-id")


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _remembered(path: Path) -> str | None:
    """The peer ID kept beside the key, if it was derived from this very key."""
    try:
        kept = json.loads(_remember_file(path).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(kept, dict) or kept.get("key_sha256") != _digest(path):
        return None
    return kept.get("peer_id") or None


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__.split("\n\n")[0]
    parser.add_argument("path", type=Path, help="the private key file (created when missing)")


def main(args: argparse.Namespace) -> int:
    found, created = peer_id(args.path)
    print(json.dumps({"path": str(args.path), "peer_id": found, "created": created}))
    return 0
