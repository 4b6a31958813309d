"""The wheelhouse is built for the hosts' platform and Python, named in the inventory
(controller/wheelhouse.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from controller.wheelhouse import (
    Target,
    download_command,
    installed_bytes,
    installer,
    main,
    pip_index,
    resolve_command,
    source_only,
    uv_command,
)


def test_the_download_asks_for_the_hosts_python_not_the_controllers():
    other = "3.12" if sys.version_info[:2] != (3, 12) else "3.11"
    command = download_command(["pip"], Path("node.txt"), Path("w"), Target(other, "2.28", "aarch64"))
    options = dict(zip(command, command[1:], strict=False))
    assert command[:2] == ["pip", "download"]
    assert "--only-binary=:all:" in command  # a source package would build for the controller's platform
    assert options["--python-version"] == other
    assert options["--abi"] == "cp" + other.replace(".", "")
    assert options["--implementation"] == "cp"
    platforms = [command[i + 1] for i, word in enumerate(command) if word == "--platform"]
    # every manylinux tag a glibc 2.28 aarch64 host runs, and none it does not
    assert platforms[0] == "manylinux_2_28_aarch64"
    assert "manylinux2014_aarch64" in platforms and "manylinux_2_17_aarch64" in platforms
    assert platforms[-1] == "manylinux1_aarch64"
    assert not [tag for tag in platforms if "x86_64" in tag or "manylinux_2_29" in tag]
    assert command[-2:] == ["--requirement", "node.txt"]
    assert "--no-deps" in command  # the packages come resolved for the hosts (step 1), not by pip's markers


def resolved(tmp_path: Path, requirement: str, platform: str, index: list[str] | None = None) -> set[str]:
    """The package names uv resolves ``requirement`` to for ``platform`` (``index`` None: this machine's)."""
    requirements = tmp_path / "req.txt"
    requirements.write_text(requirement + "\n")
    out = tmp_path / f"{platform}.txt"
    env: dict[str, str] = {}
    if index is None:
        index, env = pip_index()
    command = resolve_command(uv_command(), requirements, out, Target(), index)
    command[command.index("--python-platform") + 1] = platform
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, **env})
    assert done.returncode == 0, done.stderr[-2000:]
    return {line.split("==")[0].strip().lower() for line in out.read_text().splitlines() if "==" in line}


def wheel(directory: Path, name: str, requires: list[str] = ()) -> None:
    """A pure wheel of ``name`` 1.0 that depends on ``requires`` (PEP 508 lines, markers and all)."""
    info = f"{name}-1.0.dist-info"
    metadata = "Metadata-Version: 2.1\nName: " + name + "\nVersion: 1.0\n"
    metadata += "".join(f"Requires-Dist: {line}\n" for line in requires)
    with zipfile.ZipFile(directory / f"{name}-1.0-py3-none-any.whl", "w") as archive:
        archive.writestr(f"{name}/__init__.py", "")
        archive.writestr(f"{info}/METADATA", metadata)
        archive.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        archive.writestr(f"{info}/RECORD", "")


def test_the_resolution_evaluates_markers_for_the_hosts_not_the_controller(tmp_path):
    """A package whose dependencies hang on platform markers, as torch's CUDA libraries do (x86_64 Linux
    only): resolved for each platform it gets that platform's dependencies, whatever this machine is. pip's
    own resolution would evaluate the markers for the controller."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    markers = [
        'cudalike; platform_system == "Linux" and platform_machine == "x86_64"',
        'armlike; platform_machine == "aarch64"',
        'maclike; sys_platform == "darwin"',
    ]
    wheel(wheels, "demo", markers)
    for name in ("cudalike", "armlike", "maclike"):
        wheel(wheels, name)
    offline = ["--no-index", "--find-links", str(wheels)]
    assert resolved(tmp_path, "demo", Target().uv_platform(), offline) == {"demo", "cudalike"}
    assert resolved(tmp_path, "demo", Target(arch="aarch64").uv_platform(), offline) == {"demo", "armlike"}
    assert resolved(tmp_path, "demo", "aarch64-apple-darwin", offline) == {"demo", "maclike"}  # arm64 there


def test_torch_resolved_for_linux_x86_64_brings_its_linux_only_dependencies(tmp_path):
    """The hosts' torch from this machine's index: its CUDA libraries come with it (Linux, x86_64)."""
    linux = resolved(tmp_path, "torch==2.14.1", Target().uv_platform())
    assert "torch" in linux and len({name for name in linux if name.startswith("nvidia-")}) >= 5, linux


def test_the_resolution_is_for_the_hosts_python_and_platform():
    command = resolve_command("uv", Path("node.txt"), Path("out.txt"), Target("3.12", "2.31", "aarch64"))
    options = dict(zip(command, command[1:], strict=False))
    assert command[:3] == ["uv", "pip", "compile"]
    assert options["--python-platform"] == "aarch64-manylinux_2_31"
    assert options["--python-version"] == "3.12"
    assert Target(glibc="2.29").uv_platform() == "x86_64-manylinux_2_28"  # the newest uv names that 2.29 runs


def test_debian_12_is_the_default_target():
    target = Target()
    assert (target.python, target.glibc, target.arch, target.abi) == ("3.11", "2.36", "x86_64", "cp311")
    assert target.platforms()[0] == "manylinux_2_36_x86_64"


def test_a_change_of_requirements_target_or_index_names_another_wheelhouse():
    names = {
        Target().name("torch==2.14.1\n"),
        Target().name("torch==2.14.0\n"),
        Target("3.12").name("torch==2.14.1\n"),
        Target().name("torch==2.14.1\n", ["--index-url", "https://download.pytorch.org/whl/cpu"]),
    }
    assert len(names) == 4
    assert Target().name("torch==2.14.1\n") == Target().name("torch==2.14.1\n")


def test_only_source_distributions_are_built_on_the_controller():
    report = {
        "install": [
            {"metadata": {"name": "torch", "version": "2.14.1"}, "download_info": {"url": "https://x/t.whl"}},
            {
                "metadata": {"name": "varint", "version": "1.0.2"},
                "download_info": {"url": "https://x/v.tar.gz"},
            },
        ]
    }
    assert source_only(report) == ["varint==1.0.2"]


@pytest.mark.parametrize(
    ("option", "value", "says"),
    [
        ("--python", "311", "python must be MAJOR.MINOR"),
        ("--glibc", "2.x", "glibc must be 2.MINOR"),
        ("--glibc", "2.12", "older than any manylinux uv resolves for"),
    ],
)
def test_a_bad_target_is_refused_before_anything_is_downloaded(tmp_path, capsys, option, value, says):
    with pytest.raises(SystemExit) as exit_:
        main(["requirements/node.txt", str(tmp_path), option, value])
    assert exit_.value.code == 2
    assert says in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_what_a_wheel_unpacks_to_is_read_from_its_archive(tmp_path):
    """The role checks the host's free disk against the shipped wheels plus what they unpack to."""
    wheel = tmp_path / "demo-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("demo/__init__.py", "x = 1\n" * 10_000)  # 60,000 bytes, compressed to far fewer
        archive.writestr("demo-1.0.dist-info/METADATA", "Name: demo\n")
    assert installed_bytes(wheel) == 60_000 + len("Name: demo\n")
    assert wheel.stat().st_size < installed_bytes(wheel) / 10


def test_the_hosts_install_with_the_controllers_uv_version(tmp_path):
    """The installer shipped in the wheelhouse is uv at the version that ``uv --version`` names on the
    controller; an answer that names no version stops the build with one message."""
    assert installer("uv 0.13.9 (x86_64-unknown-linux-gnu)\n") == "uv==0.13.9"
    assert installer("uv 0.14.0") == "uv==0.14.0"
    with pytest.raises(SystemExit, match="cannot read uv's version"):
        installer("error: unknown command\n")
    # the version of this machine's uv reads (the role ships it to the hosts)
    version = subprocess.run([uv_command(), "--version"], capture_output=True, text=True).stdout
    assert installer(version).startswith("uv==0.")
