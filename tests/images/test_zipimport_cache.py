"""The node image's cache of what Python compiles from zip archives (images/node/testbed_zipimport_cache.py):
a module imported from a new archive with the same source is loaded from the cache, with this archive's file
name in its tracebacks; a changed source is compiled again; an unusable cache or a non-root user compiles as
without it. Each case runs in its own interpreter (the hook patches zipimport for the whole process)."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HOOK = REPO / "images" / "node"

# imports `probe` from the archive with the hook loaded, counting what zipimport compiled, and prints the
# module's answer, the file name its traceback names and the count
IMPORT = """
import json, os, sys, zipimport
compiled = []
def counting(pathname, source, original=zipimport._compile_source):
    compiled.append(pathname)
    return original(pathname, source)
if sys.argv[4] == "no-hook":
    zipimport._compile_source = counting
else:
    sys.path.insert(0, sys.argv[1])
    import testbed_zipimport_cache as hook
    hook.CACHE = sys.argv[3]
    if sys.argv[4] == "not-root":
        os.geteuid = lambda: 1000
    hook._compile_cached.__defaults__ = (counting,)
sys.path.insert(0, sys.argv[2])
import probe
try:
    probe.fail()
except RuntimeError as error:
    failed_in = error.__traceback__.tb_next.tb_frame.f_code.co_filename
print(json.dumps({"answer": probe.ANSWER, "failed_in": failed_in, "compiled": len(compiled)}))
"""


def _archive(directory: Path, answer: int) -> Path:
    directory.mkdir(parents=True)
    archive = directory / "payload.zip"
    with zipfile.ZipFile(archive, "w") as written:
        written.writestr("probe.py", f"ANSWER = {answer}\n\ndef fail():\n    raise RuntimeError('probe')\n")
    return archive


def _import(archive: Path, cache: Path, user: str = "root") -> dict:
    done = subprocess.run(
        [sys.executable, "-c", IMPORT, str(HOOK), str(archive), str(cache), user],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_same_source_in_a_new_archive_is_loaded_from_the_cache(tmp_path):
    # Python 3.11's zipimport compiles a module twice per import (for the spec's file name, then to run it)
    plain = _import(_archive(tmp_path / "plain", 41), tmp_path / "unused", "no-hook")
    assert (plain["answer"], plain["compiled"]) == (41, 2)
    cache = tmp_path / "cache"
    first = _import(_archive(tmp_path / "run-1", 41), cache)
    assert first == {"answer": 41, "failed_in": f"{tmp_path}/run-1/payload.zip/probe.py", "compiled": 1}
    assert len(list(cache.iterdir())) == 1
    # another archive (Ansible writes each module's to a new temporary directory), the same source
    second = _import(_archive(tmp_path / "run-2", 41), cache)
    assert second == {"answer": 41, "failed_in": f"{tmp_path}/run-2/payload.zip/probe.py", "compiled": 0}
    assert not (tmp_path / "unused").exists()


def test_a_changed_source_is_compiled_again(tmp_path):
    cache = tmp_path / "cache"
    _import(_archive(tmp_path / "run-1", 41), cache)
    changed = _import(_archive(tmp_path / "run-2", 42), cache)
    assert (changed["answer"], changed["compiled"]) == (42, 1)
    assert len(list(cache.iterdir())) == 2


def test_an_unusable_cache_or_another_user_compiles_as_without_it(tmp_path):
    blocked = tmp_path / "a-file"
    blocked.write_text("not a directory")
    for cache, user in ((blocked / "cache", "root"), (tmp_path / "cache", "not-root")):
        for run in ("run-1", "run-2"):
            result = _import(_archive(tmp_path / f"{user}-{run}", 41), cache, user)
            assert (result["answer"], result["compiled"]) == (41, 2), (cache, user, run)
    assert not (tmp_path / "cache").exists()
