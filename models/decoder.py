"""Decoders that invert the VGG encoder at one level: features -> RGB image.

Each decoder mirrors the encoder slice in reverse, with the layout (and so the
``nn.Sequential`` indices) of the published checkpoints: every encoder convolution
``a -> b`` becomes ``ReflectionPad2d(1), Conv2d(b, a, 3), ReLU`` and every max-pool a
nearest-neighbour ``Upsample(x2)``; the last convolution (to RGB) has no ReLU.
For relu3_1 that is the WCT ``feature_invertor_conv3_1.pth`` layout::

    0 ReflectionPad2d(1); 1 Conv2d(256, 128, 3); 2 ReLU; 3 Upsample(x2)
    4 ReflectionPad2d(1); 5 Conv2d(128, 128, 3); 6 ReLU
    7 ReflectionPad2d(1); 8 Conv2d(128, 64, 3); 9 ReLU; 10 Upsample(x2)
    11 ReflectionPad2d(1); 12 Conv2d(64, 64, 3); 13 ReLU
    14 ReflectionPad2d(1); 15 Conv2d(64, 3, 3)

and for relu4_1 it is the AdaIN release's ``decoder.pth``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from fractions import Fraction
from functools import partial

import torch
import torch.nn.functional as F  # noqa: N812
from torch import Tensor, nn

from models.bands import BAND_ROWS, fits_bands, in_row_bands
from models.control import pause_point
from models.devices import index_safe_slices
from models.vgg import (
    LEVELS,
    ConvStep,
    PoolStep,
    check_level,
    encoder_plan,
    level_channels,
    level_stride,
    load_sequential,
)


def _through(layers: nn.Sequential, x: Tensor) -> Tensor:
    """``layers(x)``, with a pause point (:func:`models.control.pause_point`) before each."""
    for layer in layers:
        pause_point()
        x = layer(x)
    return x


def decoder_halo_rows(level: str) -> int:
    """Feature rows above and below a band of rows that ``level``'s decoder reads so that
    the band's image rows are the whole map's (:mod:`models.bands`): each convolution
    spoils one more row at a band's cut and each upsampling doubles the spoiled rows, so
    ``c -> c + 1`` per convolution and ``c -> 2 c`` per upsampling, walked from the
    features to the image, then ``ceil(c / stride)`` (relu1_1: 1, relu2_1: 2, relu3_1: 3
    rows of features, 12 of the image)."""
    spoiled = 0
    for step in reversed(encoder_plan(level)):
        spoiled = 2 * spoiled if isinstance(step, PoolStep) else spoiled + 1
    return -(-spoiled // level_stride(level))


class Decoder(nn.Module):
    """Feature inverter for one encoder level.

    Args:
        level: the encoder level it inverts (``"relu1_1"`` .. ``"relu4_1"``).

    Shape:
        - Input: ``(B, C_level, h, w)``.
        - Output: ``(B, 3, h * s, w * s)`` RGB, roughly in ``[0, 1]`` (not clamped),
          with ``s = level_stride(level)``.
    """

    def __init__(self, level: str = "relu3_1") -> None:
        super().__init__()
        self.level = check_level(level)
        modules: list[nn.Module] = []
        steps = list(reversed(encoder_plan(level)))
        for position, step in enumerate(steps):
            if isinstance(step, PoolStep):
                modules.append(nn.Upsample(scale_factor=2, mode="nearest"))
                continue
            assert isinstance(step, ConvStep)
            modules += [
                nn.ReflectionPad2d(1),
                nn.Conv2d(step.out_channels, step.in_channels, kernel_size=3),
            ]
            if position < len(steps) - 1:
                modules.append(nn.ReLU(inplace=True))
        self.layers = nn.Sequential(*modules)

    @property
    def in_channels(self) -> int:
        return level_channels(self.level)

    def conv(self, index: int) -> nn.Conv2d:
        """``self.layers[index]``, a convolution."""
        conv = self.layers[index]
        assert isinstance(conv, nn.Conv2d)
        return conv

    def _check(self, features: Tensor) -> None:
        if features.ndim != 4 or features.shape[1] != self.in_channels:
            raise ValueError(
                f"{self.level} decoder expects (B, {self.in_channels}, h, w), "
                f"got {tuple(features.shape)}"
            )

    def _to_rgb(
        self, x: Tensor, weight: Tensor | None = None, bias: Tensor | None = None
    ) -> Tensor:
        """The last layer (reflection pad + conv to RGB), by :func:`conv3x3_reflect`."""
        conv = self.conv(-1)
        weight = conv.weight if weight is None else weight
        return conv3x3_reflect(x, weight, conv.bias if bias is None else bias)

    def _slices(self, features: Tensor) -> list[slice]:
        """The batch in slices that CUDA's 32-bit kernels take
        (:func:`~models.devices.index_safe_slices`): the largest map of one image is the
        last block's 64 channels at the output size, reflection-padded by one pixel."""
        stride = level_stride(self.level)
        height, width = (stride * side for side in features.shape[-2:])
        peak = level_channels("relu1_1") * (height + 2) * (width + 2)
        return index_safe_slices(features.shape[0], peak)

    def _in_bands(self, decode: Callable[[Tensor], Tensor], features: Tensor) -> Tensor:
        """``decode(features)``, on a CPU a band of ``BAND_ROWS`` image rows at a time when
        the image is large (:mod:`models.bands`): its last block's 64-channel maps are a
        band's, not the image's."""
        stride, halo = level_stride(self.level), decoder_halo_rows(self.level)
        full_size = (stride * features.shape[-2], stride * features.shape[-1])
        if not fits_bands(features, full_size, stride * halo):
            return decode(features)
        bands = in_row_bands(
            lambda band: {"image": decode(band)},
            features,
            band=BAND_ROWS // stride,
            halo=halo,
            scales={"image": Fraction(stride)},
        )
        return bands["image"]

    def forward(self, features: Tensor) -> Tensor:
        self._check(features)
        parts = self._slices(features)
        if len(parts) > 1:
            return torch.cat([self(features[part]) for part in parts])
        return self._in_bands(self._decode, features)

    def _decode(self, features: Tensor) -> Tensor:
        return self._to_rgb(_through(self.layers[:-2], features))

    def forward_linear(self, features: Tensor, matrix: Tensor, shift: Tensor) -> Tensor:
        """``self(M f + t)`` for a per-sample linear map ``M`` and shift ``t`` applied at every
        position (AdaIN is a diagonal ``M``, WCT a full one).

        On the CPU, and for one map shared by the batch anywhere, the map is folded into
        the first convolution instead of writing the transformed features. Reflection
        padding commutes with a per-position map, so with the first conv's weight ``W``
        ``(C_out, C, 3, 3)`` and bias ``b``:

        .. math:: W'_{ock} = \\sum_j W_{ojk}\\,M_{jc}, \\qquad
                  b'_o = b_o + \\sum_{j,k} W_{ojk}\\,t_j

        one folded convolution per image (in float32 or wider), or one for the batch when
        ``matrix``/``shift`` have batch 1. On a GPU, with one map per image, the
        transformed features are written once and the batch goes through one convolution
        (one launch instead of one per image). Neither reads anything back to the host:
        the rows are never compared (comparing them on the host was a GPU sync per pass).

        Shape:
            - features: ``(B, C_level, h, w)``; matrix: ``(1 or B, C_level, C_level)``;
              shift: ``(1 or B, C_level)``.
            - output: as :meth:`forward`.
        """
        self._check(features)
        parts = self._slices(features)
        if len(parts) > 1:
            return torch.cat(
                [self.forward_linear(features[p], _rows(matrix, p), _rows(shift, p)) for p in parts]
            )
        per_image = features.shape[0] > 1 and matrix.shape[0] > 1
        if per_image and features.device.type != "cpu":
            return self.linear_then_decode(features, matrix, shift)
        return self._in_bands(partial(self._decode_folded, matrix=matrix, shift=shift), features)

    def _decode_folded(self, features: Tensor, matrix: Tensor, shift: Tensor) -> Tensor:
        """:meth:`forward_linear` with the map folded into the first convolution."""
        per_image = features.shape[0] > 1 and matrix.shape[0] > 1
        rest = self.layers[2:]
        first_is_last = len(self.layers) == 2  # relu1_1: the only conv is the one to RGB
        inputs = features if first_is_last else self.layers[0](features)  # _to_rgb pads itself
        rows = [slice(b, b + 1) for b in range(features.shape[0])] if per_image else [slice(None)]
        outputs = []
        for row in rows:
            folded_weight, folded_bias = self.folded_first_conv(matrix[row][0], shift[row][0])
            if first_is_last:
                outputs.append(self._to_rgb(inputs[row], folded_weight, folded_bias))
            else:
                outputs.append(F.conv2d(inputs[row], folded_weight, folded_bias))
        output = torch.cat(outputs) if per_image else outputs[0]
        return output if first_is_last else self._to_rgb(_through(rest[:-2], output))

    def folded_first_conv(self, matrix: Tensor, shift: Tensor) -> tuple[Tensor, Tensor]:
        """The first convolution's weight and bias with ``f -> M f + t`` folded in (the
        formula of :meth:`forward_linear`), computed in float32 or wider and returned in
        the weight's dtype.

        Shape:
            - matrix: ``(C_level, C_level)``; shift: ``(C_level,)``.
            - output: ``(C_out, C_level, 3, 3)`` and ``(C_out,)``.
        """
        conv = self.conv(1)
        assert conv.bias is not None  # every conv of the decoder has one
        dtype = torch.promote_types(conv.weight.dtype, torch.float32)  # bf16 folds in float32
        weight = conv.weight.to(dtype)
        m, t = matrix.to(dtype), shift.to(dtype)
        folded_weight = torch.einsum("ojhw,jc->ochw", weight, m)
        folded_bias = conv.bias.to(dtype) + weight.sum(dim=(2, 3)) @ t
        return folded_weight.to(conv.weight.dtype), folded_bias.to(conv.weight.dtype)

    def linear_then_decode(self, features: Tensor, matrix: Tensor, shift: Tensor) -> Tensor:
        """``self(M f + t)`` with the transformed map written (the GPU's form of
        :meth:`forward_linear`: one batched convolution)."""
        dtype = torch.promote_types(features.dtype, torch.float32)
        transformed = torch.einsum("bjc,bchw->bjhw", matrix.to(dtype), features.to(dtype))
        transformed = transformed + shift.to(dtype)[:, :, None, None]
        output: Tensor = self(transformed.to(features.dtype))
        return output

    def load_published(self, state_dict: Mapping[str, Tensor]) -> Decoder:
        """Load a Sequential-index checkpoint of exactly this layout."""
        load_sequential(self.layers, state_dict, allow_extra=False)
        return self

    @classmethod
    def from_state_dict(cls, state_dict: Mapping[str, Tensor], level: str | None = None) -> Decoder:
        """Build a decoder from a checkpoint; ``level=None`` infers it from the first conv."""
        if level is None:
            level = level_of_decoder(state_dict)
        return cls(level).load_published(state_dict)


def _rows(t: Tensor, part: slice) -> Tensor:
    """``t``'s rows ``part`` of a batch, or ``t`` itself where it has one row for all."""
    return t if t.shape[0] == 1 else t[part]


def conv3x3_reflect(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """``conv2d(reflection_pad(x, 1), weight, bias)`` without the padded copy of ``x``.

    The interior of the output is the unpadded convolution; its one-pixel border comes
    from three-row and three-column strips of ``x`` with the reflected row or column
    (``x[1], x[0], x[1]`` at the top), and the pieces are concatenated. For a conv to
    fewer channels than it reads (64 -> 3 to RGB) that writes a 3-channel border instead
    of a padded 64-channel copy of a full-size map.

    Shape:
        - x: ``(B, C, H, W)``; weight: ``(O, C, 3, 3)``; output: ``(B, O, H, W)``.
    """
    height, width = x.shape[-2:]
    if height < 3 or width < 3:
        return F.conv2d(F.pad(x, (1, 1, 1, 1), mode="reflect"), weight, bias)

    def strip(rows_or_columns: Tensor) -> Tensor:
        return F.conv2d(rows_or_columns, weight, bias)

    def reflected_rows(first: int, middle: int) -> Tensor:  # rows (first, middle, first)
        rows = x[:, :, [first, middle, first]]
        return strip(F.pad(rows, (1, 1, 0, 0), mode="reflect"))

    left = strip(x[:, :, :, [1, 0, 1]])
    right = strip(x[:, :, :, [width - 2, width - 1, width - 2]])
    middle = torch.cat([left, F.conv2d(x, weight, bias), right], dim=3)
    top, bottom = reflected_rows(1, 0), reflected_rows(height - 2, height - 1)
    return torch.cat([top, middle, bottom], dim=2)


def level_of_decoder(state_dict: Mapping[str, Tensor]) -> str:
    """The level a decoder checkpoint inverts, read from its first conv's input width."""
    first = state_dict.get("1.weight", state_dict.get("layers.1.weight"))
    if first is None or first.ndim != 4:
        raise ValueError("not a decoder checkpoint: no 4-d '1.weight' (the first conv)")
    by_width = {level_channels(level): level for level in LEVELS}
    if first.shape[1] not in by_width:
        raise ValueError(f"decoder input width {first.shape[1]} matches no encoder level")
    return by_width[first.shape[1]]
