"""`trainer identity`: a host's Hivemind key, made once, and its peer ID, which the playbook reads on every
converge (roles/trainer). The key and the ID are Hivemind's own, made and derived without importing it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from trainer.identity import peer_id

# the command as the trainer role runs it, in a fresh interpreter: its answer, and what it imported
COMMAND = """
import json, sys
from trainer.cli import main
code = main(["identity", sys.argv[1]])
print(json.dumps(sorted({"hivemind", "torch"} & set(sys.modules))))
"""


def _command(path) -> tuple[dict, list[str]]:
    done = subprocess.run([sys.executable, "-c", COMMAND, str(path)], capture_output=True, text=True,
                          timeout=120, check=True)  # fmt: skip
    answer, imported = done.stdout.splitlines()
    return json.loads(answer), json.loads(imported)


def test_the_key_is_hiveminds_own_made_once_and_read_back_without_importing_hivemind(tmp_path):
    from hivemind.p2p import P2P, PeerID

    key = tmp_path / "hivemind" / "identity.key"
    made, imported = _command(key)
    assert imported == []  # neither Hivemind nor torch (0.3 s here; about 4 s of CPU with them)
    assert made["created"] is True and made["path"] == str(key)
    # Hivemind reads the key (its protobuf and the RSA key in it) and derives the same peer ID
    assert made["peer_id"] == PeerID.from_identity(key.read_bytes()).to_base58()
    assert key.stat().st_mode & 0o777 == 0o400  # as Hivemind writes its keys: the owner's, read-only
    again, _ = _command(key)
    assert again == {**made, "created": False}

    # a key Hivemind made: the same ID as Hivemind derives
    other = tmp_path / "other.key"
    P2P.generate_identity(str(other))
    assert peer_id(other) == (PeerID.from_identity(other.read_bytes()).to_base58(), False)
    assert peer_id(other)[0] != made["peer_id"]


def test_a_file_that_is_not_a_key_is_refused(tmp_path):
    junk = tmp_path / "identity.key"
    junk.write_bytes(b"not a key at all")
    with pytest.raises(ValueError, match="not a libp2p key file"):
        peer_id(junk)
