"""A set-up play's fingerprint: what a host converged by it depends on, as one sha256.

Hashes, on the controller: every file of the named roles (their tasks, defaults, templates...), the values of
every variable named after those roles (``<role>_*``: the defaults as the inventory and ``-e`` override them),
any further files or directories of the checkout (``paths``: the trainer's sources) and the play's own
``inputs`` (the hosts of the run and their addresses, the variables the play hands its roles). A host whose
recorded fingerprint equals this one, and whose own check still passes, needs nothing from the play
(playbooks/tasks/converged-check.yml, docs/run-overhead.md).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ansible.errors import AnsibleError
from ansible.plugins.lookup import LookupBase

DOCUMENTATION = """
name: testbed_fingerprint
short_description: sha256 of the roles, variables and files a set-up play depends on
description:
  - lookup('testbed_fingerprint', 'role_a', 'role_b', inputs={...}, paths=['trainer', 'pyproject.toml'])
  - Roles are looked up under the repository's roles/; paths are relative to the repository root.
author: testbed
"""

REPO = Path(__file__).resolve().parents[2]
#: never part of what a host receives
SKIPPED_PARTS = {"molecule", "__pycache__", ".pytest_cache"}


def _tree_digest(root: Path, digest: hashlib._Hash) -> None:
    if not root.exists():
        raise AnsibleError(f"testbed_fingerprint: {root} does not exist")
    files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
    for path in files:
        if SKIPPED_PARTS.intersection(path.relative_to(REPO).parts):
            continue
        digest.update(str(path.relative_to(REPO)).encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")


def _value(templar, raw):
    """A variable's value as the play would see it; a variable that cannot be templated here (it needs a fact
    set later) counts by its raw text, which still changes when its definition does."""
    try:
        return templar.template(raw)
    except Exception:  # noqa: BLE001 (any templating error: fall back to the definition)
        return repr(raw)


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        variables = variables or {}
        digest = hashlib.sha256()
        for role in terms:
            _tree_digest(REPO / "roles" / role, digest)
        for path in kwargs.get("paths", []):
            _tree_digest(REPO / path, digest)
        role_vars = {
            name: _value(self._templar, variables[name])
            for name in sorted(variables)
            if any(name.startswith(f"{role}_") for role in terms)
        }
        document = {"roles": list(terms), "vars": role_vars, "inputs": kwargs.get("inputs", {})}
        digest.update(json.dumps(document, sort_keys=True, default=str).encode())
        return [digest.hexdigest()]
