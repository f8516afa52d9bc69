"""A convolutional network run on a CPU a band of rows at a time, with the same result.

A 3x3 convolution with reflection padding, run on a band of rows cut from a larger map,
reflects the band's edge where the whole map would read the rows beyond it: the band's
first and last output rows are wrong, and each further convolution spoils one row more
(a pool halves the spoiled rows, an upsampling doubles them). Reading ``halo`` more rows
above and below each band, as many as the network spoils, and cutting them off again
gives the band's rows of the whole map exactly; at the map's own top and bottom the band
reads no halo and reflects as the whole map does.

A network's largest maps are then a band's, not the whole image's: VGG's relu1_1 and
its decoder's last block hold 64 channels at full size (268 MB at 1024 x 1024 in
float32), which on a CPU are also slower to write and read back than a band that stays
in the caches. ``models.vgg`` and ``models.decoder`` run their forwards through
:func:`in_row_bands`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from fractions import Fraction
from math import ceil

import torch
from torch import Tensor

#: Rows of the larger of a network's input and output that one band computes (the
#: encoder's input, the decoder's output).
BAND_ROWS = 64

#: The fewest full-size rows of a map run in bands (eight bands); fewer run whole.
BANDED_FROM_ROWS = 8 * BAND_ROWS

#: The widest full-size map run in bands: a band of a wider one no longer stays in the
#: caches, and its halos are then extra work only.
#:
#: ``.venv/bin/python benchmarks/row_bands.py --sides 512 1024 --repeats 7`` on a 2-core
#: AVX2 CPU (relu3_1, bands of 64 rows against the whole forward): at 512 px the encoder
#: 0.96x the time and 85 MB of peak RSS growth against 130, the decoder 0.96x and 52 MB
#: against 153; at 1024 px the encoder 1.22x and 161 MB against 523, the decoder 1.18x
#: and 109 MB against 514, so 1024 px maps stay whole. Bands of 128 rows (the encoder,
#: ``encoder_bands.py`` of the commit before): 1.08x and 110 MB at 512 px.
BAND_MAX_WIDTH = 512


def fits_bands(x: Tensor, full_size: tuple[int, int], halo_full_rows: int) -> bool:
    """Whether a forward whose largest map is ``full_size`` (rows, columns) runs in bands:
    on a CPU (a GPU holds the whole map and would pay a launch per band), at least
    ``BANDED_FROM_ROWS`` rows and at most ``BAND_MAX_WIDTH`` columns, and a halo of at
    most a quarter of a band on each side (in full-size rows: VGG to relu3_1 reads 12, to
    relu4_1 32, which stays whole)."""
    rows, columns = full_size
    return (
        x.device.type == "cpu"
        and rows >= BANDED_FROM_ROWS
        and columns <= BAND_MAX_WIDTH
        and 4 * halo_full_rows <= BAND_ROWS
    )


def in_row_bands(
    forward: Callable[[Tensor], dict[str, Tensor]],
    x: Tensor,
    *,
    band: int,
    halo: int,
    scales: Mapping[str, Fraction],
) -> dict[str, Tensor]:
    """``forward(x)``, computed on bands of ``band`` rows of ``x`` (the last may be short),
    each read with ``halo`` rows more above and below where ``x`` has them.

    ``scales[name]``: rows of ``forward``'s output ``name`` per row of ``x`` (``1/4`` for
    VGG's relu3_1, ``4`` for its decoder's image). ``band`` and ``halo`` are multiples of
    every downsampling's factor, so that each band's pools pair the whole map's rows; an
    output whose rows round up (a ceil-mode pool of an odd height) gets its last row from
    the last band, which ends where ``x`` does.

    Shape:
        - x: ``(B, C, H, W)``; each output ``(B, C_name, ceil(H * scale), W_name)``, in
          the memory format ``forward`` gives it.
    """
    height = x.shape[-2]
    outputs: dict[str, Tensor] = {}
    for start in range(0, height, band):
        stop = min(height, start + band)
        top, bottom = max(0, start - halo), min(height, stop + halo)
        for name, piece in forward(x[..., top:bottom, :]).items():
            scale = scales[name]
            rows = ceil(height * scale)
            begin, end = int(start * scale), min(ceil(stop * scale), rows)
            skip = int((start - top) * scale)
            if name not in outputs:
                outputs[name] = torch.empty(
                    (*piece.shape[:2], rows, piece.shape[-1]),
                    dtype=piece.dtype,
                    device=piece.device,
                ).contiguous(memory_format=_memory_format(piece))
            outputs[name][..., begin:end, :] = piece[..., skip : skip + end - begin, :]
    return outputs


def _memory_format(tensor: Tensor) -> torch.memory_format:
    """Channels-last when ``tensor`` is laid out so (and not also plain contiguous)."""
    if tensor.is_contiguous() or not tensor.is_contiguous(memory_format=torch.channels_last):
        return torch.contiguous_format
    return torch.channels_last
