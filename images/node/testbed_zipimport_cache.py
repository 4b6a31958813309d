"""Keeps what Python compiles from zip archives, on the local cluster's hosts (the node image).

Ansible runs every module from a zip of the module and its module_utils (AnsiballZ), written to a new
temporary file each time. Python's zipimport writes no bytecode for a zip, so every module run compiled the
same module_utils again, thousands of times in a test run, on the two cores the containers share. This keeps
each compiled source under CACHE, keyed by the interpreter's bytecode magic number, the file's path inside the
archive and its source, and loads it from there the next time. What it loads is what compiling that source
gives; only the code's file name is set to this run's archive, as importlib does for a .pyc. Only root's
processes use it (the modules run as root there), in a directory only root may write: what is loaded from it,
root wrote.

Loaded by testbed_zipimport_cache.pth in the system Python's site directory (a venv does not read it). Any
error reading or writing the cache falls back to compiling, as without it.
"""

import zipimport

CACHE = "/var/cache/testbed/zipimport"


def _compile_cached(pathname, source, _compile=zipimport._compile_source):
    import _imp
    import hashlib
    import marshal
    import os

    if os.geteuid() != 0:
        return _compile(pathname, source)
    inner = pathname.partition(".zip" + os.sep)[2] or pathname
    digest = hashlib.sha256(zipimport._bootstrap_external.MAGIC_NUMBER)
    digest.update(inner.encode("utf-8", "surrogateescape") + b"\0")
    digest.update(source)
    path = os.path.join(CACHE, digest.hexdigest())
    try:
        with open(path, "rb") as cached:
            code = marshal.loads(cached.read())
        _imp._fix_co_filename(code, pathname)
        return code
    except (OSError, ValueError, EOFError, TypeError):
        pass
    code = _compile(pathname, source)
    try:
        os.makedirs(CACHE, mode=0o700, exist_ok=True)
        partial = f"{path}.{os.getpid()}"
        with open(partial, "wb") as written:
            written.write(marshal.dumps(code))
        os.replace(partial, path)
    except OSError:
        pass
    return code


zipimport._compile_source = _compile_cached
