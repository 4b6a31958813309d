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


def resolved(tmp_path: Path, requirement: str, platform: str, python: str = "3.11") -> set[str]:
    """The package names uv resolves ``requirement`` to for ``platform``, with this machine's index."""
    requirements = tmp_path / "req.txt"
    requirements.write_text(requirement + "\n")
    out = tmp_path / f"{platform}.txt"
    index, env = pip_index()
    command = resolve_command(uv_command(), requirements, out, Target(python), index)
    command[command.index("--python-platform") + 1] = platform
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, **env})
    assert done.returncode == 0, done.stderr[-2000:]
    return {line.split("==")[0].strip().lower() for line in out.read_text().splitlines() if "==" in line}


def test_the_resolution_evaluates_markers_for_the_hosts_not_the_controller(tmp_path):
    """torch's CUDA libraries are dependencies only on x86_64 Linux (its markers): resolved for the hosts'
    platform they are there, resolved for a Mac or for aarch64 Linux they are not, whatever this machine
    is. pip's own resolution would evaluate the markers for the controller."""
    linux = resolved(tmp_path, "torch==2.14.1", Target().uv_platform())
    mac = resolved(tmp_path, "torch==2.14.1", "aarch64-apple-darwin")
    arm = resolved(tmp_path, "torch==2.14.1", Target(arch="aarch64").uv_platform())
    cuda = {name for name in linux if name.startswith("nvidia-")}
    assert "torch" in linux and "torch" in mac and "torch" in arm
    assert len(cuda) >= 5, linux
    assert not {name for name in mac | arm if name.startswith("nvidia-")}, (mac, arm)


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
