"""``trainer imagefolder --out DIR``: write an image-folder dataset (JPEG files, one folder per class) from
Fashion-MNIST or the synthetic images, upscaled to a realistic resolution, so that decoding and resizing can
be what bounds a run (the preprocessing strategies of docs/preprocessing.md).

    trainer imagefolder --out /srv/datasets/fashion-mnist-224 --size 224 --train 6000 --val 1000

Layout: ``DIR/train/<class>/<index>.jpg`` and ``DIR/val/<class>/<index>.jpg`` (what ``--dataset imagefolder``
reads); ``DIR/dataset.json`` records the source, size and counts. An existing complete DIR is kept.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

CLASSES = 10


def _balanced(labels: np.ndarray, count: int) -> np.ndarray:
    """Indices of ``count`` samples, ``count // 10`` of each class (every class folder gets images:
    ImageFolder numbers the classes by their folders, so train and val need the same ones).

    >>> _balanced(np.array([0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9]), 10).tolist()
    [0, 2, 4, 6, 8, 10, 12, 14, 16, 18]
    """
    per_class = count // CLASSES
    chosen = [np.flatnonzero(labels == cls)[:per_class] for cls in range(CLASSES)]
    if any(len(indices) < per_class for indices in chosen):
        raise ValueError(f"the source has fewer than {per_class} images of some class")
    return np.sort(np.concatenate(chosen))


def _source_images(
    source: str, data_root: str | None, split: str, count: int
) -> tuple[np.ndarray, np.ndarray]:
    """``count`` uint8 grey or RGB images (N×H×W or N×H×W×3) and labels of ``split`` from ``source``, the
    same number of each class."""
    from trainer.config import DEFAULT_DATA_ROOTS
    from trainer.data import SyntheticImages, _find_idx, read_idx

    if source == "fashion-mnist":
        root = Path(data_root or DEFAULT_DATA_ROOTS["fashion-mnist"])
        prefix = "train" if split == "train" else "t10k"
        images = read_idx(_find_idx(root, f"{prefix}-images", "idx3-ubyte"))
        labels = read_idx(_find_idx(root, f"{prefix}-labels", "idx1-ubyte")).astype(np.int64)
        chosen = _balanced(labels, count)
        return images[chosen], labels[chosen]
    dataset = SyntheticImages(size=20 * count, seed=0, split_offset=0 if split == "train" else 50_000_000)
    labels_all = np.asarray([dataset[index][1] for index in range(len(dataset))])
    images, labels = [], []
    for index in _balanced(labels_all, count):
        image, label = dataset[int(index)]
        scaled = (image - image.min()) / max(float(image.max() - image.min()), 1e-6) * 255
        images.append(scaled.permute(1, 2, 0).numpy().astype(np.uint8))
        labels.append(label)
    return np.stack(images), np.asarray(labels)


def write_imagefolder(
    out: Path,
    *,
    source: str,
    size: int,
    counts: dict[str, int],
    data_root: str | None = None,
    quality: int = 90,
) -> dict:
    """Write the dataset; returns what dataset.json records."""
    from PIL import Image

    for split, count in counts.items():
        images, labels = _source_images(source, data_root, split, count)
        for cls in range(CLASSES):
            (out / split / f"{cls:02d}").mkdir(parents=True, exist_ok=True)
        for index, (pixels, label) in enumerate(zip(images, labels, strict=True)):
            image = Image.fromarray(pixels).convert("RGB").resize((size, size), Image.BILINEAR)
            image.save(out / split / f"{int(label):02d}" / f"{index:06d}.jpg", quality=quality)
    record = {"source": source, "size": size, "counts": counts, "format": "jpeg", "quality": quality}
    (out / "dataset.json").write_text(json.dumps(record, indent=2) + "\n")
    return record


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, required=True, help="dataset directory to write")
    parser.add_argument("--source", choices=("fashion-mnist", "synthetic"), default="fashion-mnist")
    parser.add_argument("--data-root", help="the source's files (fashion-mnist: its idx files)")
    parser.add_argument("--size", type=int, default=224, help="image side in pixels")
    parser.add_argument("--train", type=int, default=6000, help="training images")
    parser.add_argument("--val", type=int, default=1000, help="validation images")


def main(args: argparse.Namespace) -> int:
    if args.size < 8 or args.train < CLASSES or args.val < CLASSES:
        print(
            "trainer: error: --size >= 8, --train >= 10 and --val >= 10 (images of every class)", flush=True
        )
        return 2
    counts = {"train": args.train, "val": args.val}
    existing = args.out / "dataset.json"
    if existing.is_file():
        record = json.loads(existing.read_text())
        if (
            record.get("size") == args.size
            and record.get("counts") == counts
            and record.get("source") == args.source
        ):
            print(f"imagefolder: {args.out} already holds it, kept")
            return 0
    record = write_imagefolder(
        args.out, source=args.source, size=args.size, counts=counts, data_root=args.data_root
    )
    print(f"imagefolder: wrote {sum(counts.values())} {record['size']} px JPEG images to {args.out}")
    return 0
