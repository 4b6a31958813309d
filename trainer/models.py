"""The image classifiers the study trains (3×32×32 inputs, 10 classes)."""

from __future__ import annotations

import torch
from torch import nn

MODEL_NAMES = ("resnet18", "smallcnn")
NUM_CLASSES = 10


class SmallCNN(nn.Module):
    """A tiny CNN (~0.1 M parameters) for fast tests: two conv blocks and a linear head.

    >>> SmallCNN()(torch.zeros(2, 3, 32, 32)).shape
    torch.Size([2, 10])
    """

    def __init__(self, num_classes: int = NUM_CLASSES) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, kernel_size=3, padding=1),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, kernel_size=3, padding=1),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
        )
        self.head = nn.Linear(32 * 8 * 8, num_classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(self.features(images), 1))


def build_model(name: str, *, seed: int = 0) -> nn.Module:
    """``resnet18`` is torchvision's ResNet18 with 10 classes and its ImageNet stem unchanged (as in the
    study); ``smallcnn`` is :class:`SmallCNN`. Initialisation is deterministic in ``seed`` so peers start
    from equal weights.
    """
    torch.manual_seed(seed)
    if name == "resnet18":
        from torchvision.models import resnet18

        return resnet18(num_classes=NUM_CLASSES)
    if name == "smallcnn":
        return SmallCNN()
    raise ValueError(f"unknown model {name!r}, choose from {', '.join(MODEL_NAMES)}")
