"""Datasets (all 3×32×32 images, 10 classes) and their loaders. Nothing is downloaded: data is read from disk.

- ``synthetic``: generated per index from the seed: a class-dependent smooth pattern plus noise, so a model
  can really learn it (the loss falls) without any files.
- ``fashion-mnist``: the standard idx files (``train-images-idx3-ubyte[.gz]`` …), as Debian's
  ``dataset-fashion-mnist`` installs them under /usr/share/datasets/fashion-mnist; 1×28×28 is padded to 32×32
  and repeated to 3 channels.
- ``cifar10``: the ``cifar-10-batches-py`` pickles (``data_batch_1..5``, ``test_batch``).
- ``imagefolder``: one folder per class (``ROOT/train`` and ``ROOT/val`` or ``ROOT/test`` when present,
  otherwise ``ROOT`` itself with every 10th image held out for validation), resized to 32×32. With
  ``--preprocessing decode`` every image is decoded and resized each time it is loaded (in the DataLoader's
  workers, ``--data-workers``); with ``cached`` they are decoded and resized once into a uint8 array file
  under ``--cache-dir`` (reused by later runs while the folder is unchanged) and loaded from memory.
"""

from __future__ import annotations

import gzip
import hashlib
import logging
import os
import pickle
import signal
import time
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Subset

from experiment.variables import DATA_PARALLEL_STRATEGIES
from trainer.config import ConfigError

if TYPE_CHECKING:
    from trainer.config import RunConfig

log = logging.getLogger(__name__)

DATASET_NAMES = ("synthetic", "fashion-mnist", "cifar10", "imagefolder")
NUM_CLASSES = 10
IMAGE_SHAPE = (3, 32, 32)


class SyntheticImages(Dataset):
    """Learnable synthetic images, deterministic in (seed, split, index).

    :param size: number of samples
    :param seed: the same seed gives the same class patterns and samples on every host
    :param split_offset: distinguishes the train and validation splits
    :param noise: standard deviation of the per-pixel noise (patterns have unit scale, are shifted by up to 4
        px)

    >>> image, label = SyntheticImages(size=4, seed=1)[0]
    >>> tuple(image.shape), 0 <= label < 10
    ((3, 32, 32), True)
    """

    def __init__(self, *, size: int, seed: int, split_offset: int = 0, noise: float = 5.0) -> None:
        self.size = size
        self.seed = seed
        self.split_offset = split_offset
        self.noise = noise
        generator = torch.Generator().manual_seed(seed)
        coarse = torch.randn(NUM_CLASSES, 3, 4, 4, generator=generator)
        patterns = torch.nn.functional.interpolate(
            coarse, size=IMAGE_SHAPE[1:], mode="bilinear", align_corners=False
        )
        self.patterns = patterns / patterns.std(dim=(1, 2, 3), keepdim=True)

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        if not 0 <= index < self.size:
            raise IndexError(index)
        generator = torch.Generator().manual_seed(
            (self.seed * 1_000_003 + self.split_offset + index) & 0x7FFFFFFF
        )
        label = int(torch.randint(NUM_CLASSES, (1,), generator=generator))
        scale = 0.5 + float(torch.rand(1, generator=generator))
        shift = torch.randint(-4, 5, (2,), generator=generator).tolist()
        pattern = torch.roll(self.patterns[label], shifts=shift, dims=(1, 2))
        image = scale * pattern + self.noise * torch.randn(IMAGE_SHAPE, generator=generator)
        return image, label


class ArrayImages(Dataset):
    """Images held as a uint8 array (N×C×32×32), normalised per channel on access; C=1 is repeated to 3
    channels."""

    def __init__(
        self, images: np.ndarray, labels: np.ndarray, *, mean: tuple[float, ...], std: tuple[float, ...]
    ):
        if images.ndim != 4 or images.shape[2:] != IMAGE_SHAPE[1:]:
            raise ValueError(f"expected N×C×32×32 images, got {images.shape}")
        if len(images) != len(labels):
            raise ValueError(f"{len(images)} images but {len(labels)} labels")
        self.images = torch.from_numpy(np.ascontiguousarray(images))
        self.labels = torch.from_numpy(labels.astype(np.int64))
        channels = images.shape[1]
        self.mean = torch.tensor(mean, dtype=torch.float32).view(channels, 1, 1)
        self.std = torch.tensor(std, dtype=torch.float32).view(channels, 1, 1)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        image = (self.images[index].float().div_(255.0) - self.mean) / self.std
        if image.shape[0] == 1:
            image = image.expand(3, -1, -1).contiguous()
        return image, int(self.labels[index])


# -------------------------------------------------------------------- fashion-mnist (idx files)


def read_idx(path: Path) -> np.ndarray:
    """Read an idx file (optionally gzip-compressed) into a numpy array."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as handle:
        raw = handle.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
        raise ValueError(f"not an unsigned-byte idx file: {path}")
    dims = raw[3]
    shape = tuple(int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(dims))
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims)
    if data.size != int(np.prod(shape)):
        raise ValueError(f"idx file {path} holds {data.size} values, header says {shape}")
    return data.reshape(shape)


def _find_idx(root: Path, stem: str, kind: str) -> Path:
    for name in (f"{stem}-{kind}", f"{stem}.{kind}"):
        for candidate in (root / name, root / f"{name}.gz"):
            if candidate.is_file():
                return candidate
    raise ConfigError(f"fashion-mnist file {stem}-{kind}[.gz] not found in {root}", "data_root", str(root))


def load_fashion_mnist(root: Path) -> tuple[Dataset, Dataset]:
    splits = []
    for prefix in ("train", "t10k"):
        images = read_idx(_find_idx(root, f"{prefix}-images", "idx3-ubyte"))
        labels = read_idx(_find_idx(root, f"{prefix}-labels", "idx1-ubyte"))
        padded = np.pad(images, ((0, 0), (2, 2), (2, 2)))[:, None, :, :]
        splits.append(ArrayImages(padded, labels, mean=(0.2860,), std=(0.3530,)))
    return splits[0], splits[1]


# -------------------------------------------------------------------- cifar10 (python pickles)


def load_cifar10(root: Path) -> tuple[Dataset, Dataset]:
    folder = root / "cifar-10-batches-py" if (root / "cifar-10-batches-py").is_dir() else root
    train_files = sorted(folder.glob("data_batch_*"))
    test_file = folder / "test_batch"
    if not train_files or not test_file.is_file():
        raise ConfigError(
            f"cifar-10-batches-py (data_batch_N, test_batch) not found in {root}", "data_root", str(root)
        )

    def load(files: list[Path]) -> ArrayImages:
        images, labels = [], []
        for file in files:
            with open(file, "rb") as handle:
                batch = pickle.load(handle, encoding="bytes")
            images.append(np.asarray(batch[b"data"], dtype=np.uint8).reshape(-1, 3, 32, 32))
            labels.append(np.asarray(batch[b"labels"], dtype=np.int64))
        return ArrayImages(
            np.concatenate(images),
            np.concatenate(labels),
            mean=(0.4914, 0.4822, 0.4465),
            std=(0.2470, 0.2435, 0.2616),
        )

    return load(train_files), load([test_file])


# -------------------------------------------------------------------- imagefolder


def load_imagefolder(root: Path, cache_dir: Path | None = None) -> tuple[Dataset, Dataset]:
    """Decode-per-access datasets; with ``cache_dir`` the same images decoded once into a cached array."""
    from torchvision import datasets, transforms

    transform = transforms.Compose(
        [
            transforms.Lambda(lambda image: image.convert("RGB")),
            transforms.Resize(IMAGE_SHAPE[1:]),
            transforms.ToTensor(),
            transforms.Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)),
        ]
    )
    if cache_dir is not None:
        # decoded and resized once, to uint8: ArrayImages normalises like ToTensor + Normalize(0.5, 0.5)
        transform = transforms.Compose(
            [
                transforms.Lambda(lambda image: image.convert("RGB")),
                transforms.Resize(IMAGE_SHAPE[1:]),
                transforms.PILToTensor(),
            ]
        )
    try:
        if (root / "train").is_dir():
            val_dir = next((root / name for name in ("val", "test") if (root / name).is_dir()), None)
            train = datasets.ImageFolder(str(root / "train"), transform=transform)
            if val_dir is not None:
                splits = train, datasets.ImageFolder(str(val_dir), transform=transform)
            else:
                splits = _hold_out(train)
        else:
            splits = _hold_out(datasets.ImageFolder(str(root), transform=transform))
    except FileNotFoundError as exc:
        raise ConfigError(f"no class folders with images in {root}", "data_root", str(root)) from exc
    if cache_dir is None:
        return splits
    return cached_arrays(splits[0], cache_dir, "train", root), cached_arrays(
        splits[1], cache_dir, "val", root
    )


def cached_arrays(dataset: Dataset, cache_dir: Path, split: str, root: Path) -> ArrayImages:
    """``dataset`` (uint8 C×32×32 items) as one array, from ``cache_dir`` when an earlier run cached it.

    The cache file's name digests the folder's path, its file count and newest modification time.
    """
    files = sorted(p for p in root.rglob("*") if p.is_file())
    stamp = f"{root.resolve()}|{split}|{len(files)}|{max((p.stat().st_mtime_ns for p in files), default=0)}"
    path = cache_dir / f"imagefolder-{hashlib.sha256(stamp.encode()).hexdigest()[:16]}-{split}.npz"
    if not path.is_file():
        started = time.monotonic()
        images = np.stack([np.asarray(dataset[i][0], dtype=np.uint8) for i in range(len(dataset))])
        labels = np.asarray([int(dataset[i][1]) for i in range(len(dataset))], dtype=np.int64)
        cache_dir.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.partial.npz")
        np.savez(partial, images=images, labels=labels)
        partial.replace(path)
        log.info(
            "cached %d decoded %s images in %s (%.1f s)", len(labels), split, path, time.monotonic() - started
        )
    with np.load(path) as cached:
        return ArrayImages(cached["images"], cached["labels"], mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5))


def _hold_out(dataset: Dataset) -> tuple[Dataset, Dataset]:
    indices = list(range(len(dataset)))
    val = [i for i in indices if i % 10 == 9]
    train = [i for i in indices if i % 10 != 9]
    return Subset(dataset, train), Subset(dataset, val or train[:1])


# -------------------------------------------------------------------- entry points


def build_datasets(config: RunConfig) -> tuple[Dataset, Dataset]:
    """The (train, validation) datasets of ``config.dataset``; raises ConfigError naming a missing path."""
    if config.dataset == "synthetic":
        return (
            SyntheticImages(size=10_000, seed=config.seed, split_offset=0),
            SyntheticImages(size=2_000, seed=config.seed, split_offset=50_000_000),
        )
    root_text = config.resolved_data_root
    if root_text is None:
        raise ConfigError(f"dataset {config.dataset} needs --data-root", "data_root", None)
    root = Path(root_text)
    if not root.is_dir():
        raise ConfigError(f"data root not found: {root}", "data_root", str(root))
    cache = Path(config.cache_dir) if config.preprocessing == "cached" else None
    loaders = {
        "fashion-mnist": load_fashion_mnist,
        "cifar10": load_cifar10,
        "imagefolder": lambda folder: load_imagefolder(folder, cache),
    }
    if config.dataset not in loaders:
        raise ConfigError(
            f"unknown dataset, choose from {', '.join(DATASET_NAMES)}", "dataset", config.dataset
        )
    try:
        return loaders[config.dataset](root)
    except (OSError, ValueError, pickle.UnpicklingError, KeyError) as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(
            f"cannot read {config.dataset} data in {root}: {exc}", "data_root", str(root)
        ) from exc


def data_order_seed(config: RunConfig) -> int:
    """Seed of the training data order: the run's seed mixed with the peer id, so peers see different
    batches."""
    return (config.seed * 1_000_003 + zlib.crc32(config.resolved_peer_id.encode())) & 0x7FFFFFFF


def ignore_stop_signals(worker_id: int) -> None:
    """DataLoader worker start-up: leave SIGTERM/SIGINT to the training process, which stops after the current
    step and then ends its workers (a worker killed by the group's SIGTERM would break that step)."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class ShardSampler(DistributedSampler):
    """``DistributedSampler`` (a disjoint shard per rank, one permutation shared by all ranks) that moves to
    the next permutation each time it is iterated, as ``set_epoch`` would.

    >>> shards = [list(ShardSampler(range(8), 2, rank, seed=0)) for rank in (0, 1)]
    >>> sorted(shards[0] + shards[1]) == list(range(8))
    True
    """

    def __init__(self, dataset: Any, replicas: int, rank: int, seed: int) -> None:
        super().__init__(dataset, num_replicas=replicas, rank=rank, shuffle=True, seed=seed, drop_last=True)
        self._passes = 0

    def __iter__(self):
        self.set_epoch(self._passes)
        self._passes += 1
        return super().__iter__()


def build_loaders(config: RunConfig) -> tuple[DataLoader, DataLoader]:
    """Shuffled training loader (full batches only) and an ordered validation loader."""
    train, val = build_datasets(config)
    if len(train) < config.batch_size:
        raise ConfigError(f"dataset has only {len(train)} training samples", "batch_size", config.batch_size)
    workers = config.data_workers
    extra = (
        {"persistent_workers": True, "prefetch_factor": 2, "worker_init_fn": ignore_stop_signals}
        if workers > 0
        else {}
    )
    if config.strategy in DATA_PARALLEL_STRATEGIES:
        # each rank its own shard, reshuffled each pass (the loop restarts the iterator at a data epoch's end)
        if len(train) // config.peers < config.batch_size:
            raise ConfigError(
                f"a 1/{config.peers} shard of {len(train)} training samples is less than a batch",
                "batch_size",
                config.batch_size,
            )
        sampler = ShardSampler(train, config.peers, config.rank, config.seed)
        order: dict[str, Any] = {"sampler": sampler}
    else:
        order = {"shuffle": True, "generator": torch.Generator().manual_seed(data_order_seed(config))}
    train_loader = DataLoader(
        train, batch_size=config.batch_size, drop_last=True, num_workers=workers, **order, **extra
    )
    val_loader = DataLoader(
        val, batch_size=max(config.batch_size, 128), shuffle=False, num_workers=workers, **extra
    )
    return train_loader, val_loader
