"""A generated deep-sky field: the development split's style with sparse small bright
features (stars and small galaxies on a near-black sky).

The evaluation split's worst pair for both presets was a photo under the Hubble deep
field, a kind of style that no development painting is like, so nothing could be
chosen for it without tuning on the evaluation images. This image is made by code from
a fixed seed, not copied from any photograph: ``count`` elliptical Gaussian sources,
most of them points (``sigma`` from 0.6 px, a few up to 3.6), elongated up to 3.5x at a
random angle, with a peak brightness in ``[0.25, 1]`` and one of five star colours,
over a sky of 0.02 with faint noise.

    python benchmarks/star_field.py out.png     # writes it, to look at
"""

from __future__ import annotations

import math
import sys
import tempfile
from pathlib import Path

import torch

from models.images import tensor_to_pil

#: Star colours (RGB): white, orange, blue, red-orange, blue-white.
PALETTE = (
    (1.0, 0.97, 0.92),
    (1.0, 0.75, 0.45),
    (0.65, 0.78, 1.0),
    (1.0, 0.55, 0.35),
    (0.9, 0.9, 1.0),
)


def star_field(size: int = 640, count: int = 700, seed: int = 0) -> torch.Tensor:
    """The field as ``(1, 3, size, size)`` float32 in ``[0, 1]``."""
    generator = torch.Generator().manual_seed(seed)

    def uniform() -> float:
        return float(torch.rand((), generator=generator, dtype=torch.float64))

    rows = torch.arange(size, dtype=torch.float64).view(-1, 1)
    cols = torch.arange(size, dtype=torch.float64).view(1, -1)
    palette = torch.tensor(PALETTE, dtype=torch.float64)
    image = torch.zeros(3, size, size, dtype=torch.float64)
    for _ in range(count):
        centre_y, centre_x = uniform() * size, uniform() * size
        sigma = 0.6 + 3.0 * uniform() ** 4  # mostly points, a few large sources
        elongation = 1.0 + 2.5 * uniform() ** 3
        angle = math.pi * uniform()
        peak = 0.25 + 0.75 * uniform() ** 0.5
        colour = palette[int(uniform() * len(PALETTE))]
        reach = int(4 * sigma * elongation) + 2
        top, bottom = max(0, int(centre_y) - reach), min(size, int(centre_y) + reach + 1)
        left, right = max(0, int(centre_x) - reach), min(size, int(centre_x) + reach + 1)
        dy, dx = rows[top:bottom] - centre_y, cols[:, left:right] - centre_x
        along = dx * math.cos(angle) + dy * math.sin(angle)
        across = -dx * math.sin(angle) + dy * math.cos(angle)
        source = torch.exp(-0.5 * ((along / (sigma * elongation)) ** 2 + (across / sigma) ** 2))
        image[:, top:bottom, left:right] += peak * colour.view(3, 1, 1) * source
    image += 0.02 + 0.012 * torch.randn(3, size, size, generator=generator, dtype=torch.float64)
    return image.clamp(0.0, 1.0).float()[None]


def star_field_file() -> Path:
    """The default field as a PNG in the temporary folder (written once), for the
    benchmarks' image lists."""
    path = Path(tempfile.gettempdir()) / "atelier-star-field-640-700-0.png"
    if not path.exists():
        partial = path.with_suffix(".partial.png")
        tensor_to_pil(star_field()[0]).save(partial)
        partial.replace(path)
    return path


if __name__ == "__main__":
    tensor_to_pil(star_field()[0]).save(sys.argv[1] if len(sys.argv) > 1 else "star_field.png")
