"""The wheelhouse for hosts without internet: every pinned dependency of the trainer as a wheel for the
hosts' platform and Python, which need not be the controller's (role trainer,
``trainer_dependency_source=wheelhouse``; tests/controller/test_wheelhouse.py).

Built on the controller in four steps, into a directory named after what it holds (so a change of the
requirements or of the target gives a new one, and an unchanged one is reused):

1. resolve the requirements for the target (``uv pip compile --python-platform ARCH-manylinux_2_N
   --python-version X.Y``): every environment marker is evaluated for the hosts, not for the controller, so
   torch's Linux-only dependencies are in the set whatever the controller runs (``resolved.txt``);
2. find the packages that PyPI has only as source distributions (``pip install --dry-run --report``:
   hivemind's varint, python-baseconv, prefetch_generator; DeepSpeed);
3. build those into wheels; each must come out pure Python (``py3-none-any``), which installs anywhere;
4. ``pip download --no-deps --only-binary=:all:`` every package of step 1 for the target (``--platform``,
   ``--python-version``, ``--implementation cp``, ``--abi``), the pure wheels of step 3 found with
   ``--find-links``, and the installer the hosts run: uv, at the controller's uv version.

The hosts install with uv, not pip: uv unpacks each wheel once into its cache and hard-links the venv's files
to it, so a host's disk holds the venv once while it installs (pip keeps every downloaded wheel until the
end, the wheels' size again, 3 GB for CUDA torch).

The index is pip's (``pip config list``, read for uv as ``scripts/uv_pip_install.py`` does); ``--pip-args``
go to both resolvers, so they must be options pip and uv share (``--index-url``, ``--extra-index-url``,
``--find-links``).

The result is the directory ``wheels/``; the role ships it to one host with rsync, which serves it to the
others over the cluster network while they install (roles/trainer/tasks/wheelhouse.yml).
``python -m controller.wheelhouse --help``; the role prints its JSON answer.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

#: Debian 12's: the default target (the infra example's image, and the stand-in VMs' base)
DEFAULT_PYTHON = "3.11"
DEFAULT_GLIBC = "2.36"
DEFAULT_ARCH = "x86_64"
#: the manylinux tags older than PEP 600 and the glibc each stands for
_LEGACY_MANYLINUX = {"manylinux2014": 17, "manylinux2010": 12, "manylinux1": 5}
#: the glibc minors uv's ``--python-platform`` names as ``ARCH-manylinux_2_N`` (uv 0.13)
_UV_GLIBC_MINORS = (17, 28, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40)
_REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Target:
    """The hosts' Python (``3.11``), C library (glibc ``2.36``) and machine (``x86_64``)."""

    python: str = DEFAULT_PYTHON
    glibc: str = DEFAULT_GLIBC
    arch: str = DEFAULT_ARCH

    def __post_init__(self) -> None:
        problems = []
        if not re.fullmatch(r"3\.[0-9]{1,2}", self.python):
            problems.append(f"python must be MAJOR.MINOR such as 3.11, not {self.python!r}")
        if not re.fullmatch(r"2\.[0-9]{1,2}", self.glibc):
            problems.append(f"glibc must be 2.MINOR such as 2.36, not {self.glibc!r}")
        if not re.fullmatch(r"[a-z0-9_]+", self.arch):
            problems.append(f"arch must be a machine name such as x86_64 or aarch64, not {self.arch!r}")
        if problems:
            raise ValueError("wheelhouse target: " + "; ".join(problems))

    @property
    def abi(self) -> str:
        return "cp" + self.python.replace(".", "")

    def platforms(self) -> list[str]:
        """Every manylinux tag a host with this glibc runs, newest first (pip 23 does not expand them)."""
        newest = int(self.glibc.split(".")[1])
        tags = []
        for minor in range(newest, 4, -1):
            tags.append(f"manylinux_2_{minor}_{self.arch}")
            tags += [f"{legacy}_{self.arch}" for legacy, glibc in _LEGACY_MANYLINUX.items() if glibc == minor]
        return tags

    def uv_platform(self) -> str:
        """uv's name for the hosts' platform: the newest manylinux it names that this glibc runs.

        >>> Target().uv_platform(), Target(glibc="2.30", arch="aarch64").uv_platform()
        ('x86_64-manylinux_2_36', 'aarch64-manylinux_2_28')
        """
        newest = int(self.glibc.split(".")[1])
        runs = [minor for minor in _UV_GLIBC_MINORS if minor <= newest]
        if not runs:
            raise ValueError(
                f"wheelhouse target: glibc {self.glibc} is older than any manylinux uv resolves for"
            )
        return f"{self.arch}-manylinux_2_{runs[-1]}"

    def name(self, requirements: str, pip_args: list[str] = ()) -> str:
        """The wheelhouse's directory name: the target, and a hash of it, the requirements and pip's
        arguments."""
        digest = hashlib.sha256(f"{requirements}\n{self}\n{list(pip_args)}".encode()).hexdigest()[:16]
        return f"{self.abi}-{self.arch}-glibc{self.glibc}-{digest}"


def resolve_command(
    uv: str, requirements: Path, out: Path, target: Target, index: list[str] = (), pip_args: list[str] = ()
) -> list[str]:
    """The ``uv pip compile`` of step 1: every package and version the hosts need, markers evaluated for
    them."""
    return [
        uv, "pip", "compile", "--quiet", "--no-header", "--no-annotate",
        "--python-platform", target.uv_platform(), "--python-version", target.python,
        *index, *pip_args, "--output-file", str(out), str(requirements),
    ]  # fmt: skip


def download_command(
    pip: list[str], requirements: Path, dest: Path, target: Target, pip_args: list[str] = ()
) -> list[str]:
    """The ``pip download`` of step 4: the resolved packages (no resolution of its own: pip would evaluate
    markers for the controller), binary wheels only, for the target, step 3's pure wheels beside."""
    platforms = [option for tag in target.platforms() for option in ("--platform", tag)]
    return [
        *pip, "download", "--quiet", "--no-deps", "--only-binary=:all:", "--implementation", "cp",
        "--python-version", target.python, "--abi", target.abi, *platforms,
        "--find-links", str(dest), "--dest", str(dest), *pip_args, "--requirement", str(requirements),
    ]  # fmt: skip


def uv_command() -> str:
    """uv beside this Python (the project's venv has it) or on PATH."""
    beside = Path(sys.executable).parent / "uv"
    found = str(beside) if beside.exists() else shutil.which("uv")
    if not found:
        raise SystemExit(
            f"wheelhouse: uv is needed to resolve for the hosts' platform: not at {beside} nor on PATH"
        )
    return found


def installer(version_output: str) -> str:
    """The hosts' installer requirement from what ``uv --version`` printed on the controller.

    >>> installer("uv 0.13.9 (x86_64-unknown-linux-gnu)")
    'uv==0.13.9'
    """
    match = re.fullmatch(r"uv ([0-9][0-9A-Za-z.]*)(?: .*)?", version_output.strip())
    if not match:
        raise SystemExit(f"wheelhouse: cannot read uv's version from `uv --version`: {version_output!r}")
    return f"uv=={match.group(1)}"


def pip_index() -> tuple[list[str], dict[str, str]]:
    """pip's index settings of this machine as uv's options and environment (scripts/uv_pip_install.py)."""
    spec = importlib.util.spec_from_file_location("uv_pip_install", _REPO / "scripts" / "uv_pip_install.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    listed = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False
    )
    return module.uv_options(module.pip_settings(listed.stdout))


def source_only(report: dict) -> list[str]:
    """``name==version`` of every package the resolver would take from a source distribution.

    >>> source_only({"install": [
    ...     {"metadata": {"name": "torch", "version": "2.14.1"}, "download_info": {"url": "https://x/torch-2.14.1-cp311.whl"}},
    ...     {"metadata": {"name": "varint", "version": "1.0.2"}, "download_info": {"url": "https://x/varint-1.0.2.tar.gz"}}]})
    ['varint==1.0.2']
    """
    return [
        f"{item['metadata']['name']}=={item['metadata']['version']}"
        for item in report.get("install", [])
        if not item["download_info"]["url"].endswith(".whl")
    ]


def installed_bytes(wheel: Path) -> int:
    """What ``wheel`` unpacks to: its members' uncompressed sizes, read from the archive's directory."""
    with zipfile.ZipFile(wheel) as archive:
        return sum(member.file_size for member in archive.infolist())


def _run(command: list[str], what: str, env: dict[str, str] | None = None) -> None:
    done = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise SystemExit(f"wheelhouse: {what} failed ({' '.join(command[:6])} ...):\n{tail}")


def build(
    requirements: Path, root: Path, target: Target, pip_args: list[str] = (), pip: list[str] | None = None
) -> dict:
    """Build (or find) the wheelhouse for ``target``; returns what the role needs to ship it. ``pip_args``
    (e.g. ``--index-url`` of a CPU-only torch index) go to the resolver and the download."""
    pip = pip or [sys.executable, "-m", "pip"]
    uv = uv_command()
    version = subprocess.run([uv, "--version"], capture_output=True, text=True, check=False).stdout
    tool = installer(version)
    text = requirements.read_text()
    directory = root / target.name(f"{text}\n{tool}", pip_args)
    wheels = directory / "wheels"
    built = not (directory / ".complete").is_file()
    if built:
        shutil.rmtree(directory, ignore_errors=True)
        wheels.mkdir(parents=True)
        resolved = directory / "resolved.txt"
        index, index_env = pip_index()
        _run(
            resolve_command(uv, requirements, resolved, target, index, list(pip_args)),
            f"resolving the requirements for {target}",
            env={**os.environ, **index_env},
        )
        report = directory / "resolve.json"
        _run([*pip, "install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(report),
              *pip_args, "--requirement", str(requirements)], "finding the source-only packages")  # fmt: skip
        sources = source_only(json.loads(report.read_text()))
        if sources:
            _run([*pip, "wheel", "--quiet", "--no-deps", "--wheel-dir", str(wheels), *sources],
                 "building wheels of " + ", ".join(sources))  # fmt: skip
            impure = [path.name for path in wheels.glob("*.whl") if not path.name.endswith("-none-any.whl")]
            if impure:
                raise SystemExit(
                    f"wheelhouse: {impure} built for the controller's platform only; these have no wheel for "
                    f"{target} on the index: install them from an index instead"
                )
        _run(
            download_command(pip, resolved, wheels, target, pip_args),
            f"downloading the wheels for {target}",
        )
        (directory / "installer.txt").write_text(tool + "\n")
        _run(
            download_command(pip, directory / "installer.txt", wheels, target, pip_args),
            f"downloading the installer ({tool}) for {target}",
        )
        (directory / ".complete").write_text(text)
    paths = sorted(wheels.glob("*.whl"))
    names = [path.name for path in paths]
    return {
        "directory": str(wheels.resolve()),
        "built": built,
        "target": {"python": target.python, "glibc": target.glibc, "arch": target.arch, "abi": target.abi},
        "wheels": len(names),
        "installer": tool,
        # what is shipped (to one host) and what it unpacks to (on every host)
        "bytes": sum(path.stat().st_size for path in paths),
        "installed_bytes": sum(installed_bytes(path) for path in paths),
        "tags": sorted({"-".join(name[: -len(".whl")].split("-")[-3:]) for name in names}),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m controller.wheelhouse", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("requirements", type=Path, help="the pinned requirements (requirements/node.txt)")
    parser.add_argument("root", type=Path, help="where wheelhouses are kept (one directory each)")
    parser.add_argument("--python", default=DEFAULT_PYTHON, help="the hosts' Python, MAJOR.MINOR")
    parser.add_argument("--glibc", default=DEFAULT_GLIBC, help="the hosts' glibc version (ldd --version)")
    parser.add_argument("--arch", default=DEFAULT_ARCH, help="the hosts' machine (uname -m)")
    parser.add_argument("--pip-args", default="", help="more arguments for pip (one string), e.g. an index")
    args = parser.parse_args(argv)
    try:
        target = Target(args.python, args.glibc, args.arch)
        target.uv_platform()  # a glibc uv names no platform for: refused before anything is resolved
    except ValueError as error:
        parser.error(str(error))
    print(json.dumps(build(args.requirements, args.root, target, shlex.split(args.pip_args))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
