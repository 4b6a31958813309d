"""How a host installs the trainer's wheelhouse: pip against uv (what role trainer runs), each from the same
wheelhouse served over HTTP as the serving host does for the others (``--source dir``: read from the
directory, as the serving host itself), into a fresh venv on this machine, one after the other. Prints each
installer's seconds, the most disk it held at once (sampled free space, so run it on a quiet disk) and what
stays, and the ratios.

    python benchmarks/wheelhouse_install.py [--wheelhouse DIR] [--source http|dir]

DIR is a wheelhouse's ``wheels/`` directory (default: the newest under ~/.cache/testbed/wheelhouse, which
``trainer_dependency_source=wheelhouse`` builds; ``python -m controller.wheelhouse`` builds one by hand).
Both install with bytecode compiled, as the role does (pip by default, uv with ``--compile-bytecode``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REQUIREMENTS = REPO / "requirements" / "node.txt"


def newest_wheelhouse() -> Path:
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "testbed" / "wheelhouse"
    built = sorted(root.glob("*/.complete"), key=lambda path: path.stat().st_mtime)
    if not built:
        raise SystemExit(f"wheelhouse_install: no wheelhouse under {root}: pass --wheelhouse DIR")
    return built[-1].parent / "wheels"


def used_bytes(path: Path) -> int:
    """Bytes in files under ``path``, each inode once (uv's hard links are one file)."""
    done = subprocess.run(["du", "-s", "-B1", str(path)], capture_output=True, text=True, check=True)
    return int(done.stdout.split()[0])


def measure(command: list[str], work: Path, python: str) -> dict:
    """Run ``command`` in a fresh venv under ``work``; seconds, peak disk held (free space sampled every
    0.2 s), and what stays once the installer's own files are gone."""
    venv = work / "venv"
    subprocess.run([python, "-m", "venv", str(venv)], check=True)
    free_before = shutil.disk_usage(work).free
    lowest = [free_before]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.2):
            lowest[0] = min(lowest[0], shutil.disk_usage(work).free)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    started = time.monotonic()
    done = subprocess.run(
        [part.replace("{venv}", str(venv)) for part in command], capture_output=True, text=True
    )
    seconds = time.monotonic() - started
    stop.set()
    sampler.join()
    if done.returncode != 0:
        raise SystemExit(
            f"wheelhouse_install: {command[0]} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
        )
    shutil.rmtree(work / "cache", ignore_errors=True)
    return {"seconds": seconds, "peak_bytes": free_before - lowest[0], "venv_bytes": used_bytes(venv)}


def serve(wheels: Path, python: str) -> tuple[subprocess.Popen, str]:
    """``python -m http.server`` on the wheelhouse, as the role's serving host runs it; its URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([python, "-m", "http.server", str(port), "--bind", "127.0.0.1"], cwd=wheels,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    for _ in range(100):
        with socket.socket() as client:
            if client.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.1)
    return server, f"http://127.0.0.1:{port}/"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wheelhouse", type=Path, help="a wheelhouse's wheels/ directory")
    parser.add_argument("--python", default="/usr/bin/python3", help="the venvs' interpreter")
    parser.add_argument("--source", choices=("http", "dir"), default="http", help="the wheels' source")
    args = parser.parse_args(argv)
    wheels = (args.wheelhouse or newest_wheelhouse()).resolve()
    uv = Path(sys.executable).parent / "uv"
    if not uv.exists():
        raise SystemExit(f"wheelhouse_install: uv is needed beside {sys.executable}")
    server, links = serve(wheels, args.python) if args.source == "http" else (None, str(wheels))
    source = ["--no-index", "--find-links", links, "--requirement", str(REQUIREMENTS)]
    installers = {
        "pip": ["{venv}/bin/pip", "install", "--quiet", "--no-cache-dir", "--trusted-host", "127.0.0.1",
                *source],
        "uv": [str(uv), "pip", "install", "--quiet", "--python", "{venv}/bin/python", "--cache-dir", "CACHE",
               "--link-mode", "hardlink", "--compile-bytecode", *source],
    }  # fmt: skip
    scratch = REPO / "build" if (REPO / "build").is_dir() else None
    results = {}
    try:
        for name, command in installers.items():
            with tempfile.TemporaryDirectory(dir=scratch) as tmp:
                work = Path(tmp)
                command = [part.replace("CACHE", str(work / "cache")) for part in command]
                results[name] = measure(command, work, args.python)
    finally:
        if server:
            server.terminate()
    count = len(list(wheels.glob("*.whl")))
    print(f"wheelhouse {wheels} ({count} wheels) from {links}, {os.cpu_count()} cores")
    print(f"{'installer':10} {'seconds':>8} {'peak GB':>8} {'venv GB':>8}")
    for name, result in results.items():
        peak, venv = result["peak_bytes"] / 1e9, result["venv_bytes"] / 1e9
        print(f"{name:10} {result['seconds']:8.1f} {peak:8.2f} {venv:8.2f}")
    pip, uv_result = results["pip"], results["uv"]
    print(
        f"uv / pip: time {uv_result['seconds'] / pip['seconds']:.2f}x, "
        f"peak disk {uv_result['peak_bytes'] / pip['peak_bytes']:.2f}x"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
