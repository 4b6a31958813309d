"""The wheelhouse is built for the hosts' platform and Python, named in the inventory
(controller/wheelhouse.py)."""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

import pytest

from controller.wheelhouse import Target, download_command, installed_bytes, main, source_only


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
    [("--python", "311", "python must be MAJOR.MINOR"), ("--glibc", "2.x", "glibc must be 2.MINOR")],
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
