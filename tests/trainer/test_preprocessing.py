"""Preprocessing strategies: an image-folder dataset written as JPEG by ``trainer imagefolder``,
decoded per access or cached once; both give the same tensors, and the benchmark compares them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from trainer_testing import REPO, trainer_env

from trainer.data import load_imagefolder
from trainer.imagefolder import write_imagefolder


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("imagefolder") / "synthetic-48"
    write_imagefolder(out, source="synthetic", size=48, counts={"train": 40, "val": 10})
    return out


def test_the_folder_has_one_directory_per_class(folder):
    record = json.loads((folder / "dataset.json").read_text())
    assert record["size"] == 48 and record["counts"] == {"train": 40, "val": 10}
    images = sorted((folder / "train").rglob("*.jpg"))
    assert len(images) == 40 and len({p.parent.name for p in images}) > 1


def test_cached_equals_decoded(folder, tmp_path):
    decoded_train, decoded_val = load_imagefolder(folder)
    cached_train, cached_val = load_imagefolder(folder, tmp_path / "cache")
    assert len(cached_train) == len(decoded_train) == 40 and len(cached_val) == len(decoded_val) == 10
    for index in (0, 17, 39):
        (a, label_a), (b, label_b) = decoded_train[index], cached_train[index]
        assert label_a == label_b and a.shape == b.shape == (3, 32, 32)
        assert torch.allclose(a, b, atol=1e-5)
    files = sorted((tmp_path / "cache").glob("*.npz"))
    assert len(files) == 2  # train and val, reused by the next run
    again, _ = load_imagefolder(folder, tmp_path / "cache")
    assert sorted((tmp_path / "cache").glob("*.npz")) == files and len(again) == 40


# decoding JPEGs every step against reading a cached array: a margin that holds on a loaded host
@pytest.mark.slow
@pytest.mark.load_tolerant
@pytest.mark.timeout(600)
def test_benchmark_compares_the_strategies(tmp_path):
    command = [sys.executable, "benchmarks/preprocessing.py", "--size", "96", "--train", "300",
               "--steps", "15", "--workers", "0", "--out", str(tmp_path)]  # fmt: skip
    env = dict(trainer_env(), PYTHONPATH=str(REPO))
    run = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=500)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    rows = {row["strategy"]: row for row in json.loads((tmp_path / "preprocessing.json").read_text())}
    # decoding 96 px JPEGs every step costs more than reading a cached array
    assert rows["cached"]["data_ms"] < rows["decode"]["data_ms"], rows
    assert "fastest:" in run.stdout and "cached data-loading share" in run.stdout
    command = [sys.executable, "-m", "trainer", "report", str(tmp_path), "--out", str(tmp_path / "r")]
    report = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert report.returncode == 0, report.stderr[-2000:]
    assert os.path.isfile(tmp_path / "r" / "breakdown.csv")
