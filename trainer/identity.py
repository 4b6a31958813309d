"""``trainer identity PATH``: this host's Hivemind identity, created once, and its peer ID.

A Hivemind peer's ID is the hash of its private key. Hivemind makes a new key for every peer unless it is
given one (``identity_path``), so a bootstrap peer's address is known only once it is up. With a key made
ahead of time, the playbook knows the bootstrap peer's full multiaddr before any peer starts and starts every
peer at once (the others retry their join until it listens: ``_join_dht`` in
trainer/strategies/hivemind/strategy.py).

Prints one JSON line: ``{"path": ..., "peer_id": ..., "created": true|false}``. A key that exists is only
read.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

HELP = "this host's Hivemind identity: create the key once, print its peer ID"


def peer_id(path: Path) -> tuple[str, bool]:
    """(the base58 peer ID of the key at ``path``, whether it was created now)."""
    from hivemind.p2p import P2P, PeerID

    created = not path.exists()
    if created:
        path.parent.mkdir(parents=True, exist_ok=True)
        P2P.generate_identity(str(path))  # RSA, written 0400: the same key format p2pd reads
    return PeerID.from_identity(path.read_bytes()).to_base58(), created


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__.split("\n\n")[0]
    parser.add_argument("path", type=Path, help="the private key file (created when missing)")


def main(args: argparse.Namespace) -> int:
    found, created = peer_id(args.path)
    print(json.dumps({"path": str(args.path), "peer_id": found, "created": created}))
    return 0
