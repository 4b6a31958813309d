"""Datasets: shapes, labels, learnable synthetic data, on-disk formats written by the tests themselves."""

from __future__ import annotations

import gzip
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from trainer.config import ConfigError, RunConfig
from trainer.data import SyntheticImages, build_datasets, build_loaders, read_idx
from trainer.models import build_model


def write_idx(path: Path, array: np.ndarray, *, compress: bool) -> None:
    header = struct.pack(">BBBB", 0, 0, 0x08, array.ndim) + b"".join(
        struct.pack(">I", d) for d in array.shape
    )
    payload = header + array.astype(np.uint8).tobytes()
    if compress:
        with gzip.open(f"{path}.gz", "wb") as handle:
            handle.write(payload)
    else:
        path.write_bytes(payload)


def make_fashion_mnist(root: Path, *, train: int = 64, test: int = 16, compress: bool = True) -> np.ndarray:
    rng = np.random.default_rng(0)
    for prefix, count in (("train", train), ("t10k", test)):
        images = rng.integers(0, 256, size=(count, 28, 28), dtype=np.uint8)
        labels = np.arange(count, dtype=np.uint8) % 10
        write_idx(root / f"{prefix}-images-idx3-ubyte", images, compress=compress)
        write_idx(root / f"{prefix}-labels-idx1-ubyte", labels, compress=compress)
        if prefix == "train":
            first_image = images[0]
    return first_image


def check_split(dataset, size: int) -> None:
    assert len(dataset) == size
    image, label = dataset[0]
    assert image.shape == (3, 32, 32) and image.dtype == torch.float32
    assert isinstance(label, int) and 0 <= label < 10


@pytest.mark.parametrize("compress", [True, False])
def test_fashion_mnist_idx_files(tmp_path, compress) -> None:
    first = make_fashion_mnist(tmp_path, compress=compress)
    train, val = build_datasets(RunConfig(dataset="fashion-mnist", data_root=str(tmp_path)).validate())
    check_split(train, 64)
    check_split(val, 16)
    image, label = train[0]
    assert label == 0
    assert torch.equal(image[0], image[1]) and torch.equal(image[1], image[2])  # grey repeated to 3 channels
    restored = image[0] * 0.3530 + 0.2860
    assert torch.allclose(restored[2:30, 2:30] * 255, torch.from_numpy(first).float(), atol=1e-3)
    assert torch.allclose(restored[:2], torch.zeros(2, 32), atol=1e-5)  # padding is background


def test_fashion_mnist_on_this_host_if_installed() -> None:
    root = Path("/usr/share/datasets/fashion-mnist")
    if not root.is_dir():
        pytest.skip("dataset-fashion-mnist is not installed")
    train, val = build_datasets(RunConfig(dataset="fashion-mnist").validate())
    check_split(train, 60_000)
    check_split(val, 10_000)


def test_read_idx_rejects_truncated_file(tmp_path) -> None:
    path = tmp_path / "bad-idx3-ubyte"
    write_idx(path, np.zeros((4, 28, 28)), compress=False)
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(ValueError, match="header says"):
        read_idx(path)


def test_missing_fashion_mnist_files_name_the_path(tmp_path) -> None:
    config = RunConfig(dataset="fashion-mnist", data_root=str(tmp_path)).validate()
    with pytest.raises(ConfigError, match=f"train-images-idx3-ubyte.*not found in {tmp_path}"):
        build_datasets(config)


def test_cifar10_pickles(tmp_path) -> None:
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    rng = np.random.default_rng(1)
    for name, count in (("data_batch_1", 20), ("data_batch_2", 12), ("test_batch", 10)):
        batch = {
            b"data": rng.integers(0, 256, (count, 3072), dtype=np.uint8),
            b"labels": [i % 10 for i in range(count)],
        }
        with open(folder / name, "wb") as handle:
            pickle.dump(batch, handle)
    train, val = build_datasets(RunConfig(dataset="cifar10", data_root=str(tmp_path)).validate())
    check_split(train, 32)
    check_split(val, 10)
    assert [train[i][1] for i in range(3)] == [0, 1, 2]


def test_imagefolder_with_pngs(tmp_path) -> None:
    from PIL import Image

    for class_name, colour in (("cat", (255, 0, 0)), ("dog", (0, 0, 255))):
        (tmp_path / class_name).mkdir()
        for index in range(10):
            Image.new("RGB", (40, 30), colour).save(tmp_path / class_name / f"{index}.png")
    train, val = build_datasets(RunConfig(dataset="imagefolder", data_root=str(tmp_path)).validate())
    check_split(train, 18)
    check_split(val, 2)
    image, label = train[0]
    assert label == 0 and image[0].mean() > 0.9 and image[2].mean() < -0.9  # red cat, normalised to ±1


def test_imagefolder_without_classes_is_a_clear_error(tmp_path) -> None:
    with pytest.raises(ConfigError, match="no class folders"):
        build_datasets(RunConfig(dataset="imagefolder", data_root=str(tmp_path)).validate())


def test_synthetic_is_deterministic_and_balanced() -> None:
    first, second = SyntheticImages(size=200, seed=3), SyntheticImages(size=200, seed=3)
    assert torch.equal(first[7][0], second[7][0]) and first[7][1] == second[7][1]
    assert not torch.equal(first[7][0], SyntheticImages(size=200, seed=4)[7][0])
    labels = [first[i][1] for i in range(200)]
    assert set(labels) == set(range(10))
    check_split(first, 200)


def test_synthetic_is_learnable() -> None:
    """smallcnn on synthetic data: the loss really falls, and validation accuracy beats chance clearly."""
    torch.manual_seed(0)
    config = RunConfig(model="smallcnn", batch_size=32, data_workers=0).validate()
    train_loader, val_loader = build_loaders(config)
    model = build_model("smallcnn")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    losses = []
    for index, (images, labels) in enumerate(train_loader):
        if index == 80:
            break
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert sum(losses[-10:]) / 10 < 0.8 * sum(losses[:10]) / 10
    images, labels = next(iter(val_loader))
    accuracy = (model(images).argmax(1) == labels).float().mean().item()
    assert accuracy > 0.3


def test_peers_see_different_batch_orders() -> None:
    loaders = [
        build_loaders(RunConfig(model="smallcnn", peer_id=peer).validate())[0] for peer in ("p1", "p2")
    ]
    first_batches = [next(iter(loader))[1] for loader in loaders]
    assert not torch.equal(*first_batches)
