"""The normalised VGG-19 encoder, sliced at relu1_1, relu2_1, relu3_1 and relu4_1.

The layer order and ``nn.Sequential`` indices follow the published checkpoints (the
AdaIN release's ``vgg_normalised.pth`` and the WCT ``vgg_normalised_conv*_1.pth``
prefixes), so their ``state_dict`` loads without renaming::

    0  Conv2d(3, 3, 1)            RGB in [0, 1] -> BGR * 255 - ImageNet mean (folded)
    1  ReflectionPad2d(1); 2 Conv2d(3, 64, 3); 3 ReLU          -> relu1_1
    4  ReflectionPad2d(1); 5 Conv2d(64, 64, 3); 6 ReLU
    7  MaxPool2d(2, 2, ceil_mode=True)
    8  ReflectionPad2d(1); 9 Conv2d(64, 128, 3); 10 ReLU       -> relu2_1
    ...                                                         -> relu3_1 (17)
    ...                                                         -> relu4_1 (30)

A checkpoint for a shallower level is a prefix of a deeper one; extra layers in a
deeper file (the AdaIN release goes on to relu5_4) are ignored.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import partial

import torch
from torch import Tensor, nn

from models.bands import BAND_ROWS, fits_bands, in_row_bands
from models.control import pause_point
from models.devices import index_safe_slices

#: The feature levels, shallow to deep.
LEVELS: tuple[str, ...] = ("relu1_1", "relu2_1", "relu3_1", "relu4_1")

#: VGG-19's convolutions up to relu4_1: output widths, with "M" for a 2x2 max-pool.
_VGG19_PLAN: tuple[int | str, ...] = (64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512)
#: Position in ``_VGG19_PLAN`` of the convolution that ends at each level.
_LEVEL_AT_PLAN = {"relu1_1": 0, "relu2_1": 3, "relu3_1": 6, "relu4_1": 11}

_KEY = re.compile(r"^(?:layers\.)?(\d+)\.(weight|bias)$")


@dataclass(frozen=True)
class ConvStep:
    """One 3x3 convolution of the plan: ``in_channels -> out_channels``."""

    in_channels: int
    out_channels: int


@dataclass(frozen=True)
class PoolStep:
    """A 2x2 max-pool (ceil mode): halves the resolution."""


def check_level(level: str) -> str:
    """Return ``level`` if it is one of :data:`LEVELS`, else raise ``ValueError``."""
    if level not in LEVELS:
        raise ValueError(f"unknown feature level {level!r}; expected one of {LEVELS}")
    return level


def encoder_plan(depth: str) -> list[ConvStep | PoolStep]:
    """The encoder's steps after the 1x1 preprocessing conv, up to ``depth``'s ReLU."""
    steps: list[ConvStep | PoolStep] = []
    channels = 3
    for item in _VGG19_PLAN[: _LEVEL_AT_PLAN[check_level(depth)] + 1]:
        if item == "M":
            steps.append(PoolStep())
        else:
            steps.append(ConvStep(channels, int(item)))
            channels = int(item)
    return steps


def level_channels(level: str) -> int:
    """Number of feature channels at ``level`` (64, 128, 256 or 512)."""
    return int(_VGG19_PLAN[_LEVEL_AT_PLAN[check_level(level)]])


def level_stride(level: str) -> int:
    """Downsampling factor from the image to ``level``'s feature map (1, 2, 4 or 8)."""
    stride: int = 2 ** sum(isinstance(step, PoolStep) for step in encoder_plan(level))
    return stride


def halo_rows(level: str) -> int:
    """Image rows above and below a band of rows that a forward to ``level`` reads so
    that the band's own features are the whole image's.

    At a band's cut each 3x3 convolution reflects the band's edge instead of reading the
    rows beyond it, which spoils one more row of its output; a 2x2 pool halves the
    spoiled rows (rounding up) and doubles what a row is worth in the image. Walked
    through the plan: ``c -> c + 1`` per convolution, ``c -> ceil(c / 2)`` per pool, and
    the halo is ``c * level_stride(level)`` (relu1_1: 1, relu2_1: 4, relu3_1: 12,
    relu4_1: 32), a multiple of the stride."""
    spoiled = 0
    for step in encoder_plan(level):
        spoiled = -(-spoiled // 2) if isinstance(step, PoolStep) else spoiled + 1
    return spoiled * level_stride(level)


def _layer_indices(state_dict: Mapping[str, Tensor]) -> dict[int, dict[str, Tensor]]:
    """Group ``"<index>.weight"`` / ``"<index>.bias"`` keys by Sequential index."""
    grouped: dict[int, dict[str, Tensor]] = {}
    for key, value in state_dict.items():
        match = _KEY.match(key)
        if match is None:
            raise ValueError(f"unexpected checkpoint key {key!r}; expected '<index>.weight|bias'")
        grouped.setdefault(int(match.group(1)), {})[match.group(2)] = value
    return grouped


def load_sequential(
    layers: nn.Sequential, state_dict: Mapping[str, Tensor], *, allow_extra: bool
) -> None:
    """Copy a Sequential-index ``state_dict`` into ``layers``, with clear errors.

    Args:
        layers: the target network.
        state_dict: keys ``"<index>.weight"`` and ``"<index>.bias"`` (an optional
            ``"layers."`` prefix is accepted).
        allow_extra: ignore layers past the end of ``layers`` (a deeper checkpoint).

    Raises:
        ValueError: a layer is missing, has the wrong shape, or is unexpected.
    """
    grouped = _layer_indices(state_dict)
    expected = {
        index: module for index, module in enumerate(layers) if isinstance(module, nn.Conv2d)
    }
    missing = sorted(set(expected) - set(grouped))
    if missing:
        raise ValueError(
            f"checkpoint is missing layers {missing} (it has {sorted(grouped)}); "
            "is it for a shallower level?"
        )
    extra = sorted(set(grouped) - set(expected))
    if extra and not (allow_extra and min(extra) >= len(layers)):
        raise ValueError(f"checkpoint has unexpected layers {extra} for this network")
    with torch.no_grad():
        for index, conv in expected.items():
            for name in ("weight", "bias"):
                source = grouped[index].get(name)
                target = getattr(conv, name)
                if source is None or source.shape != target.shape:
                    got = None if source is None else tuple(source.shape)
                    raise ValueError(
                        f"layer {index}.{name}: expected shape {tuple(target.shape)}, got {got}"
                    )
                target.copy_(source)


class VGGEncoder(nn.Module):
    """Normalised VGG-19 up to ``depth``, returning features at any of its levels.

    Args:
        depth: the deepest level computed (``"relu1_1"`` .. ``"relu4_1"``).

    Shape:
        - Input: ``(B, 3, H, W)`` RGB in ``[0, 1]``.
        - Output of :meth:`forward`: ``{level: (B, C_level, ceil(H / s), ceil(W / s))}``
          with ``s = level_stride(level)`` and ``C_level = level_channels(level)``.
    """

    def __init__(self, depth: str = "relu3_1") -> None:
        super().__init__()
        self.depth = check_level(depth)
        modules: list[nn.Module] = [nn.Conv2d(3, 3, kernel_size=1)]
        self.level_index: dict[str, int] = {}
        plan = encoder_plan(depth)
        level_at_conv = {_conv_number(level): level for level in self.levels}
        conv_number = 0
        for step in plan:
            if isinstance(step, PoolStep):
                modules.append(nn.MaxPool2d(kernel_size=2, stride=2, ceil_mode=True))
                continue
            modules += [
                nn.ReflectionPad2d(1),
                nn.Conv2d(step.in_channels, step.out_channels, kernel_size=3),
                nn.ReLU(inplace=True),  # the conv's output is not kept: no copy
            ]
            if conv_number in level_at_conv:
                self.level_index[level_at_conv[conv_number]] = len(modules) - 1
            conv_number += 1
        self.layers = nn.Sequential(*modules)

    @property
    def levels(self) -> tuple[str, ...]:
        """The levels this encoder can return, shallow to deep."""
        return LEVELS[: LEVELS.index(self.depth) + 1]

    @property
    def stride(self) -> int:
        """Downsampling factor at the deepest level: inputs are padded to a multiple of it."""
        return level_stride(self.depth)

    def forward(self, x: Tensor, levels: Iterable[str] | None = None) -> dict[str, Tensor]:
        """Features at ``levels`` (default: every level up to ``depth``)."""
        wanted = set(self.levels if levels is None else levels)
        unknown = wanted - set(self.levels)
        if unknown:
            raise ValueError(
                f"levels {sorted(unknown)} are deeper than this encoder's {self.depth}"
            )
        if x.ndim != 4 or x.shape[1] != 3:
            raise ValueError(f"expected images shaped (B, 3, H, W), got {tuple(x.shape)}")
        parts = index_safe_slices(x.shape[0], self.peak_elements(*x.shape[-2:]))
        if len(parts) > 1:  # a batch too large for CUDA's 32-bit kernels, in slices
            pieces = [self(x[part], wanted) for part in parts]
            return {level: torch.cat([piece[level] for piece in pieces]) for level in wanted}
        deepest = max(wanted, key=LEVELS.index)
        stride, halo = level_stride(deepest), halo_rows(deepest)
        if fits_bands(x, (x.shape[-2], x.shape[-1]), halo) and BAND_ROWS % stride == 0:
            # relu1_1's map a band at a time (see models.bands), bit for bit the same here
            # (benchmarks/row_bands.py)
            scales = {level: Fraction(1, level_stride(level)) for level in wanted}
            return in_row_bands(
                partial(self._whole, wanted=wanted), x, band=BAND_ROWS, halo=halo, scales=scales
            )
        return self._whole(x, wanted)

    def _whole(self, x: Tensor, wanted: set[str]) -> dict[str, Tensor]:
        stop = max(self.level_index[level] for level in wanted)
        features: dict[str, Tensor] = {}
        by_index = {self.level_index[level]: level for level in wanted}
        for index, module in enumerate(self.layers[: stop + 1]):
            pause_point()  # where a forward may wait for more urgent work
            x = module(x)
            if index in by_index:
                features[by_index[index]] = x
        return features

    def relu1_1_layers(self) -> tuple[nn.Conv2d, nn.Conv2d]:
        """The 1x1 preprocessing (RGB in [0, 1] to VGG's input) and relu1_1's 3x3
        convolution: what a relu1_1 pass computed piece by piece reads."""
        preprocess, conv = self.layers[0], self.layers[2]
        assert isinstance(preprocess, nn.Conv2d) and isinstance(conv, nn.Conv2d)
        return preprocess, conv

    def peak_elements(self, height: int, width: int) -> int:
        """Elements of the largest map of one ``height x width`` image: relu1_1's 64
        channels at full size, reflection-padded by one pixel."""
        return level_channels("relu1_1") * (height + 2) * (width + 2)

    def encode(self, x: Tensor, level: str) -> Tensor:
        """Features at one level: ``(B, C_level, H / s, W / s)``."""
        features: dict[str, Tensor] = self(x, (level,))
        return features[level]

    def load_published(self, state_dict: Mapping[str, Tensor]) -> VGGEncoder:
        """Load a published Sequential-index checkpoint (deeper files are truncated)."""
        load_sequential(self.layers, state_dict, allow_extra=True)
        return self

    @classmethod
    def from_state_dict(
        cls, state_dict: Mapping[str, Tensor], depth: str | None = None
    ) -> VGGEncoder:
        """Build an encoder from a checkpoint; ``depth=None`` takes the deepest level it covers."""
        if depth is None:
            depth = deepest_level_in(state_dict)
        return cls(depth).load_published(state_dict)


def _conv_number(level: str) -> int:
    """How many 3x3 convolutions precede ``level``'s (its 0-based conv number)."""
    return sum(1 for item in _VGG19_PLAN[: _LEVEL_AT_PLAN[level]] if item != "M")


def deepest_level_in(state_dict: Mapping[str, Tensor]) -> str:
    """The deepest level whose whole encoder prefix is present in ``state_dict``."""
    present = set(_layer_indices(state_dict))
    covered = [
        level
        for level in LEVELS
        if {
            index
            for index, module in enumerate(VGGEncoder(level).layers)
            if isinstance(module, nn.Conv2d)
        }
        <= present
    ]
    if not covered:
        raise ValueError("checkpoint does not hold even the relu1_1 prefix of the VGG encoder")
    return covered[-1]


def levels_up_to(depth: str) -> Sequence[str]:
    """``LEVELS`` from relu1_1 through ``depth``."""
    return LEVELS[: LEVELS.index(check_level(depth)) + 1]
