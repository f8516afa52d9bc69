"""A relu1_1 WCT pass on the CPU without writing its whole 64-channel map.

The relu1_1 round trip is one convolution each way around a ReLU,

.. math:: f = \\mathrm{ReLU}(W_e * \\mathrm{pad}(P x) + b_e), \\qquad
          y = W_d' * \\mathrm{pad}(f) + b_d'

(``P`` the encoder's 1x1 preprocessing, ``pad`` a one-pixel reflection, ``W_d'`` and
``b_d'`` the decoder's convolution to RGB with the pass's affine map folded in, see
:meth:`models.decoder.Decoder.forward_linear`). Written whole, ``f`` is 64 floats per
pixel (67 MB at 512 x 512, 268 MB at 1024), and on a CPU that map costs more than the
two convolutions' arithmetic: it is written, page-faulted in afresh, reordered between
memory formats and read back.

Here the map is made twice, each time in a form that never holds all of it:

1. the statistics: past ``COVARIANCE_POSITIONS`` the content covariance is estimated
   on the grid of stride ``s > 1`` (:func:`~models.adain.whitening.grid_stride`), and
   ``f`` at the grid's positions ``(s i, s j)`` is the encoder's convolution evaluated
   with stride ``s``: ``1 / s^2`` of the map, the grid's values;
2. the image: ``f`` is rebuilt a band of rows at a time (with the one row above and
   below that the decoder's 3x3 kernel reads, reflected at the image's edges as
   ``pad(f)`` reflects them), decoded, and dropped, so a band stays in the cache.

Below the grid limit (``s = 1``) the covariance reads the whole map, so the pipeline
runs the whole-map pass there (:meth:`models.adain.pipeline.StyleTransfer._banded_fits`).
The result is the whole-map pass's to float rounding (``tests/models/adain/test_adain_banded.py``).
The experiment script of commit 0be32e8, on one 2-core CPU (15 interleaved calls): at 512 x 512 the
banded pass took 107.6 ms, the whole-map pass 136.6 ms on a channels-last image (what
``fast=True`` and the service run) and 298.0 ms on a contiguous one; at 1024 x 1024,
371.2 against 441.0 and 1078.4 ms; at 256 x 256 (``s = 1``), 56.2 against 51.9 and 65.8.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F  # noqa: N812
from torch import Tensor

from models.decoder import Decoder
from models.vgg import VGGEncoder

#: Bytes of one band of the relu1_1 map (rows x width x 64 channels): small enough to
#: stay in the cache between the encoder's write and the decoder's read. 512 px wide, a
#: band is 32 rows; 2, 4 and 8 MiB measured alike, 0.5 MiB slower (per-call overhead).
BAND_BYTES = 4 * 1024 * 1024

#: The smallest side a banded pass takes (a two-pixel reflection needs three).
MIN_SIDE = 3


def relu1_1_grid_features(encoder: VGGEncoder, image: Tensor, stride: int) -> Tensor:
    """relu1_1 features of ``image`` at the positions ``(s i, s j)`` only, flattened: the
    encoder's convolution evaluated with stride ``s`` on the one-pixel reflection, so
    ``1 / s^2`` of the map is ever made. These are the positions
    :func:`~models.adain.whitening.feature_covariance` reads on a map of stride ``s``
    (:func:`~models.adain.whitening.grid_stride`), so the covariance of this grid is the
    whole map's to float rounding; a style enlarged to a stage's side needs no more (at
    1024 px its whole relu1_1 map would be 268 MB).

    Shape:
        - image: ``(B, 3, H, W)`` in the encoder's dtype; output: ``(B, 64, n)``,
          ``n = ceil(H / s) ceil(W / s)``.
    """
    preprocess, conv = encoder.relu1_1_layers()
    padded = F.pad(preprocess(image), (1, 1, 1, 1), mode="reflect")
    return F.relu_(F.conv2d(padded, conv.weight, conv.bias, stride=stride)).flatten(2)


class BandedRelu11:
    """The relu1_1 encoder and decoder of one model, run as described in the module's text.

    The input is reflected by two pixels, so the encoder's convolution gives ``f`` on
    rows and columns ``-1 .. H`` (``W``) at once; the values it gives at ``-1`` and
    ``H`` are not ``pad(f)``'s (a 3x3 kernel is not symmetric), so those rows and
    columns are overwritten with rows ``1`` and ``H - 2`` as ``pad(f)`` has them. A
    reflection by two pixels has the one-pixel reflection inside it, so the grid reads
    the same input the unbanded encoder does.

    Args:
        encoder: a :class:`~models.vgg.VGGEncoder` (its 1x1 preprocessing and first 3x3
            convolution are used).
        decoder: the relu1_1 :class:`~models.decoder.Decoder`.
    """

    def __init__(self, encoder: VGGEncoder, decoder: Decoder) -> None:
        if decoder.level != "relu1_1":
            raise ValueError(f"a banded pass needs the relu1_1 decoder, got {decoder.level}")
        self.preprocess, self.encode_conv = encoder.relu1_1_layers()
        self.decoder = decoder

    def padded_input(self, image: Tensor) -> Tensor:
        """``P x`` reflected by two pixels, channels-last: ``(B, 3, H + 4, W + 4)``."""
        height, width = image.shape[-2:]
        if min(height, width) < MIN_SIDE:
            raise ValueError(
                f"a banded pass needs at least {MIN_SIDE} x {MIN_SIDE} pixels, got {height} x {width}"
            )
        padded = F.pad(self.preprocess(image), (2, 2, 2, 2), mode="reflect")
        return padded.contiguous(memory_format=torch.channels_last)

    def grid_features(self, padded: Tensor, stride: int) -> Tensor:
        """``f`` at the positions ``(s i, s j)``, flattened: ``(B, 64, n)`` with
        ``n = ceil(H / s) ceil(W / s)`` (every position used by ``feature_covariance``).

        Shape:
            - padded: ``(B, 3, H + 4, W + 4)`` from :meth:`padded_input`.
        """
        conv = self.encode_conv
        inner = padded[:, :, 1:-1, 1:-1]  # the one-pixel reflection
        grid = F.relu_(F.conv2d(inner, conv.weight, conv.bias, stride=stride))
        return grid.flatten(2)

    def decode(self, padded: Tensor, matrix: Tensor, shift: Tensor) -> Tensor:
        """``decoder(M f + t)`` band by band, from the padded input of :meth:`padded_input`.

        Shape:
            - padded: ``(B, 3, H + 4, W + 4)``; matrix: ``(1 or B, 64, 64)``; shift:
              ``(1 or B, 64)``.
            - output: ``(B, 3, H, W)``.
        """
        height, width = padded.shape[-2] - 4, padded.shape[-1] - 4
        conv = self.encode_conv
        row_bytes = (width + 2) * conv.out_channels * padded.element_size()
        rows_per_band = max(4, BAND_BYTES // row_bytes)
        outputs = []
        for index in range(padded.shape[0]):
            row = min(index, matrix.shape[0] - 1)
            weight, bias = self.decoder.folded_first_conv(matrix[row], shift[row])
            bands = []
            for top in range(0, height, rows_per_band):
                bottom = min(top + rows_per_band, height)
                # f on rows top - 1 .. bottom and columns -1 .. W
                rows = padded[index : index + 1, :, top : bottom + 4]
                features = F.relu_(F.conv2d(rows, conv.weight, conv.bias))
                features[..., 0] = features[..., 2]  # pad(f): column 1 left of column 0
                features[..., -1] = features[..., -3]  # and column W - 2 right of W - 1
                if top == 0:
                    features[:, :, 0] = features[:, :, 2]
                if bottom == height:
                    features[:, :, -1] = features[:, :, -3]
                bands.append(F.conv2d(features, weight, bias))
            outputs.append(torch.cat(bands, dim=2))
        return torch.cat(outputs)
