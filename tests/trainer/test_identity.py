"""`trainer identity`: a host's Hivemind key, made once, and its peer ID, which the playbook reads on every
converge (roles/trainer) and which is kept beside the key so that a later call need not import Hivemind."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from trainer.identity import peer_id

# a second call in a fresh interpreter: its answer, and whether it imported Hivemind to give it
SECOND_CALL = """
import json, sys
from pathlib import Path
from trainer.identity import peer_id
print(json.dumps([*peer_id(Path(sys.argv[1])), "hivemind" in sys.modules]))
"""


def _second_call(path) -> list:
    done = subprocess.run([sys.executable, "-c", SECOND_CALL, str(path)], capture_output=True, text=True,
                          timeout=120, check=True)  # fmt: skip
    return json.loads(done.stdout)


@pytest.mark.hivemind
def test_the_key_is_made_once_and_its_peer_id_is_read_back_without_hivemind(tmp_path):
    from hivemind.p2p import P2P, PeerID

    key = tmp_path / "hivemind" / "identity.key"
    made, created = peer_id(key)
    assert created and made == PeerID.from_identity(key.read_bytes()).to_base58()
    assert _second_call(key) == [made, False, False]

    # another key in its place (a host re-imaged, the old record kept): derived from the key, not the record
    key.unlink()
    P2P.generate_identity(str(key))
    other = PeerID.from_identity(key.read_bytes()).to_base58()
    assert other != made
    assert _second_call(key) == [other, False, True]
    assert _second_call(key) == [other, False, False]  # and kept again

    # a record that cannot be read is derived again, not trusted
    (tmp_path / "hivemind" / "identity.key.peer-id").write_text("{not json")
    assert _second_call(key) == [other, False, True]
