"""``ShapesDataset``: an endless, deterministic stream of captioned-shapes images."""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import Dataset

from models.shapes.render import render
from models.shapes.scenes import sample_scene
from models.shapes.splits import SPLITS, check_split
from models.shapes.vocab import Scene


def to_tensor(image: np.ndarray) -> torch.Tensor:
    """``uint8 (H, W, 3)`` -> ``float32 (3, H, W)`` in ``[0, 1]``."""
    return torch.from_numpy(image).permute(2, 0, 1).to(torch.float32).div_(255.0)


class ShapesDataset(Dataset[tuple[torch.Tensor, str]]):
    """Procedural captioned shapes, 32x32 RGB, 1 to 3 objects on black.

    Item ``i`` is drawn from a generator seeded with ``(seed, split, i)``, so it is the
    same across runs, workers and processes, and any index is available in O(1).

    Args:
        split: ``"train"`` (never a held-out colour-shape pair) or ``"heldout"``
            (every caption names at least one held-out pair).
        seed: dataset seed; different seeds give independent streams.
        length: the nominal number of items (``__len__``); indices wrap nothing.

    Shape:
        item: ``(image, caption)`` with ``image`` float32 ``(3, 32, 32)`` in ``[0, 1]``.
    """

    def __init__(self, split: str = "train", *, seed: int = 0, length: int = 100_000) -> None:
        self.split = check_split(split)
        if length < 1:
            raise ValueError(f"length must be >= 1, got {length}")
        self.seed = seed
        self.length = length

    def __len__(self) -> int:
        return self.length

    def scene(self, index: int) -> Scene:
        """The :class:`~models.shapes.vocab.Scene` behind item ``index``."""
        if not 0 <= index < self.length:
            raise IndexError(f"index {index} out of range for length {self.length}")
        rng = np.random.default_rng([self.seed, SPLITS.index(self.split), index])
        return sample_scene(rng, self.split)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, str]:
        scene = self.scene(index)
        return to_tensor(render(scene)), scene.caption

    def extra_repr(self) -> str:
        return f"split={self.split!r}, seed={self.seed}, length={self.length}"

    def __repr__(self) -> str:
        return f"ShapesDataset({self.extra_repr()})"
