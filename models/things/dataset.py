"""``ThingsDataset``: an endless, deterministic stream of captioned everyday things."""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass, field

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
from models.things.vocab import Thing

#: Seed stream tag, so that a ThingsDataset never replays a ShapesDataset's draws.
_STREAM = 0x7415


@dataclass
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

    split: str = "train"
    _: KW_ONLY
    seed: int = 0
    length: int = 1_000_000
    image_size: int = CANVAS
    shapes_share: float = SHAPES_SHARE
    things: int | None = None
    pool: tuple[Thing, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        check_split(self.split)
        if self.length < 1:
            raise ValueError(f"length must be >= 1, got {self.length}")
        if self.image_size < 8:
            raise ValueError(f"image_size must be >= 8, got {self.image_size}")
        if not 0.0 <= self.shapes_share <= 1.0:
            raise ValueError(f"shapes_share must be in [0, 1], got {self.shapes_share}")
        self.pool = subset_pool(self.things)

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
