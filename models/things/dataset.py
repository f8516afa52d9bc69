"""``ThingsDataset``: an endless, deterministic stream of captioned everyday things."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import Dataset

from models.things.scenes import (
    CANVAS,
    SHAPES_SHARE,
    ThingScene,
    draw_float,
    sample_scene,
    subset_pool,
)
from models.things.splits import SPLITS, check_split

#: Seed stream tag, so that a ThingsDataset never replays a ShapesDataset's draws.
_STREAM = 0x7415


class ThingsDataset(Dataset[tuple[torch.Tensor, str]]):
    """Captioned things (and, for ``shapes_share`` of the items, captioned shapes).

    Item ``i`` is drawn from a generator seeded with ``(seed, split, i)``, so it is the
    same across runs, workers and processes, and any index is available in O(1).

    Args:
        split: ``"train"`` (never a held-out paraphrase or colour pair) or ``"heldout"``
            (every caption's first object is held out).
        seed: dataset seed; different seeds give independent streams.
        length: the nominal number of items (``__len__``).
        image_size: side of the returned images; scenes are drawn at 64 px and resized
            (bilinear, antialiased) when this differs.
        shapes_share: the share of items that are shapes-world scenes (black canvas).
        things: draw only this many things, spread over the vocabulary
            (:func:`~models.things.scenes.subset_pool`: a CPU-sized training run);
            ``None``: all of them.

    Shape:
        item: ``(image, caption)`` with ``image`` float32 ``(3, image_size, image_size)``
        in ``[0, 1]``.
    """

    def __init__(
        self,
        split: str = "train",
        *,
        seed: int = 0,
        length: int = 1_000_000,
        image_size: int = CANVAS,
        shapes_share: float = SHAPES_SHARE,
        things: int | None = None,
    ) -> None:
        self.split = check_split(split)
        if length < 1:
            raise ValueError(f"length must be >= 1, got {length}")
        if image_size < 8:
            raise ValueError(f"image_size must be >= 8, got {image_size}")
        if not 0.0 <= shapes_share <= 1.0:
            raise ValueError(f"shapes_share must be in [0, 1], got {shapes_share}")
        self.seed = seed
        self.length = length
        self.image_size = image_size
        self.shapes_share = shapes_share
        self.things = things
        self.pool = subset_pool(things)

    def __len__(self) -> int:
        return self.length

    def scene(self, index: int) -> ThingScene:
        """The :class:`~models.things.scenes.ThingScene` behind item ``index``."""
        if not 0 <= index < self.length:
            raise IndexError(f"index {index} out of range for length {self.length}")
        rng = np.random.default_rng([self.seed, _STREAM, SPLITS.index(self.split), index])
        return sample_scene(rng, self.split, shapes_share=self.shapes_share, pool=self.pool)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, str]:
        scene = self.scene(index)
        image = torch.from_numpy(draw_float(scene)).permute(2, 0, 1).contiguous()
        if self.image_size != CANVAS:
            image = F.interpolate(
                image[None], size=(self.image_size,) * 2, mode="bilinear", antialias=True
            )[0].clamp_(0.0, 1.0)
        return image, scene.caption

    def extra_repr(self) -> str:
        return (
            f"split={self.split!r}, seed={self.seed}, length={self.length}, "
            f"image_size={self.image_size}, shapes_share={self.shapes_share}, "
            f"things={self.things}"
        )

    def __repr__(self) -> str:
        return f"ThingsDataset({self.extra_repr()})"
