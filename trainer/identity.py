"""``trainer identity PATH``: this host's Hivemind identity, created once, and its peer ID.

A Hivemind peer's ID is the hash of its private key. Hivemind makes a new key for every peer unless it is
given one (``identity_path``), so a bootstrap peer's address is known only once it is up. With a key made
ahead of time, the playbook knows the bootstrap peer's full multiaddr before any peer starts and starts every
peer at once (the others retry their join until it listens: ``_join_dht`` in
trainer/strategies/hivemind/strategy.py).

Prints one JSON line: ``{"path": ..., "peer_id": ..., "created": true|false}``. A key that exists is only
read. The key and the ID are what hivemind 1.1.12 makes and derives (``P2P.generate_identity``,
``PeerID.from_identity``), written here with ``cryptography`` alone: importing Hivemind (and with it torch)
took about 4 s of CPU on each host, the longest task of a cold bring-up when every peer paid it at once.
The format, from libp2p's peer-ID specification:
- the key file: a protobuf ``PrivateKey {Type = RSA (0), Data = the RSA key's PKCS#1 DER}``;
- the peer ID: base58btc of the multihash ``sha2-256`` of the protobuf ``PublicKey {Type = RSA, Data = the
  public key's SubjectPublicKeyInfo DER}``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
from pathlib import Path

HELP = "this host's Hivemind identity: create the key once, print its peer ID"

_RSA = 0  # libp2p's KeyType.RSA
_SHA2_256 = 0x12  # the multihash code of sha2-256
_BASE58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"  # base58btc (Bitcoin's alphabet)


def peer_id(path: Path) -> tuple[str, bool]:
    """(the base58 peer ID of the key at ``path``, whether it was created now)."""
    created = not path.exists()
    if created:
        path.parent.mkdir(parents=True, exist_ok=True)
        _write_key(path)
    return _peer_id_of(path.read_bytes()), created


def _write_key(path: Path) -> None:
    """A new 2048-bit RSA key in libp2p's format, readable by its owner only (as Hivemind writes it)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    encoding, private_format = serialization.Encoding.DER, serialization.PrivateFormat.TraditionalOpenSSL
    der = key.private_bytes(encoding, private_format, serialization.NoEncryption())
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
    with os.fdopen(descriptor, "wb") as out:
        out.write(_key_message(der))


def _peer_id_of(key_file: bytes) -> str:
    from cryptography.hazmat.primitives import serialization

    key_type, der = _read_key_message(key_file)
    if key_type != _RSA:
        raise ValueError(f"not an RSA key (libp2p key type {key_type}): Hivemind makes RSA keys")
    public = serialization.load_der_private_key(der, password=None).public_key()
    spki = public.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    digest = hashlib.sha256(_key_message(spki)).digest()
    return _base58(bytes([_SHA2_256, len(digest)]) + digest)


def _key_message(data: bytes) -> bytes:
    """The protobuf message ``{1: Type = RSA, 2: Data = data}`` (libp2p's PrivateKey and PublicKey)."""
    return bytes([0x08, _RSA, 0x12]) + _varint(len(data)) + data


def _read_key_message(message: bytes) -> tuple[int, bytes]:
    """(Type, Data) of a libp2p key message as _key_message writes it (fields 1 and 2, in that order)."""
    if len(message) < 4 or message[0] != 0x08 or message[2] != 0x12:
        raise ValueError("not a libp2p key file (a protobuf PrivateKey with its type, then its data)")
    length, start = 0, 3
    for shift in range(0, 35, 7):
        byte = message[start]
        start += 1
        length |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
    if start + length != len(message):
        raise ValueError("a libp2p key file of the wrong length")
    return message[1], message[start:]


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _base58(data: bytes) -> str:
    number = int.from_bytes(data, "big")
    digits = ""
    while number:
        number, rest = divmod(number, 58)
        digits = _BASE58[rest] + digits
    return _BASE58[0] * (len(data) - len(data.lstrip(b"\0"))) + digits


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__.split("\n\n")[0]
    parser.add_argument("path", type=Path, help="the private key file (created when missing)")


def main(args: argparse.Namespace) -> int:
    found, created = peer_id(args.path)
    print(json.dumps({"path": str(args.path), "peer_id": found, "created": created}))
    return 0
