"""Arbitrary style transfer with AdaIN (Huang & Belongie, 2017), single- or multi-level.

Single-level (the paper): ``decode_l(AdaIN(encode_l(content), encode_l(style)))``.
Multi-level (coarse to fine, as in WCT): stylise and decode at the deepest level, then
re-encode that image at the next shallower level, apply AdaIN again with the style's
statistics there, decode, and so on; each pass refines the textures at a finer scale.
A level may come back: the default pass runs relu3_1 -> relu2_1 twice, since each
decoder only approximately reproduces the statistics it was given and the second round
closes much of that gap (see benchmarks/adain_quality.py).

``alpha`` blends, at every pass, the restyled features with the *photo's* features at
that level, so ``alpha = 0`` gives the last level's plain reconstruction of the photo
(and not a chain of reconstructions whose errors add up).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812
from torch import Tensor, nn

from models.adain.color import luminance, with_chroma_of
from models.adain.presets import (
    detail_band,
    get_preset,
    matched_detail,
    restore_detail,
    scale_image,
)
from models.adain.stats import FeatureStats, StyleStatsCache
from models.adain.transfer import adain_affine, region_labels, transfer
from models.checkpoints import load_state_dict
from models.control import StepControl, take_rows, wanted_rows
from models.decoder import Decoder
from models.devices import bf16_supported
from models.hub import Manifest, find_file, resolve
from models.vgg import LEVELS, VGGEncoder, check_level, level_stride

#: The default coarse-to-fine pass (established by benchmarks/adain_quality.py).
DEFAULT_LEVELS: tuple[str, ...] = ("relu3_1", "relu2_1", "relu3_1", "relu2_1")

#: Smallest style image side: two pixels at relu4_1 (stride 8) for the 3x3 reflection pad.
MIN_STYLE_SIDE = 16

#: Files of the shared normalised VGG-19 and WCT decoders, relative to a weights folder.
ENCODER_FILE = "vgg19-normalised/vgg_normalised_conv3_1.pth"
DECODER_FILES = {
    "relu1_1": "vgg19-normalised/feature_invertor_conv1_1.pth",
    "relu2_1": "vgg19-normalised/feature_invertor_conv2_1.pth",
    "relu3_1": "vgg19-normalised/feature_invertor_conv3_1.pth",
}
#: The AdaIN release's relu4_1 pair: optional, used when both files are found.
ADAIN_ENCODER_FILE = "adain/vgg_normalised.pth"
ADAIN_DECODER_FILE = "adain/decoder.pth"


def check_levels(levels: Sequence[str], available: Sequence[str]) -> tuple[str, ...]:
    """Validate a pass order: known levels, each with a decoder (a level may repeat)."""
    levels = tuple(levels)
    if not levels:
        raise ValueError("levels must name at least one feature level")
    for level in levels:
        check_level(level)
        if level not in available:
            raise ValueError(f"no decoder for {level}; available: {tuple(available)}")
    return levels


def pad_to_multiple(image: Tensor, multiple: int) -> tuple[Tensor, tuple[int, int]]:
    """Pad ``(B, C, H, W)`` on the bottom/right to multiples of ``multiple`` (at least 2x it).

    The encoder halves the image at each pool and its 3x3 reflection padding needs two
    pixels at the deepest level, hence the ``2 * multiple`` minimum. Reflection padding
    (replicate when the image is too small to reflect). Returns the padded image and the
    original ``(H, W)`` to crop back to.
    """
    height, width = image.shape[-2:]
    pad_h = max(-height % multiple, 2 * multiple - height)
    pad_w = max(-width % multiple, 2 * multiple - width)
    if pad_h == 0 and pad_w == 0:
        return image, (height, width)
    mode = "reflect" if pad_h < height and pad_w < width else "replicate"
    return F.pad(image, (0, pad_w, 0, pad_h), mode=mode), (height, width)


def _take_images(
    rows: Tensor,
    image: Tensor,
    content: Tensor,
    anchors: dict[str, Tensor],
    stats: list[dict[str, FeatureStats]],
    masks: list[Tensor] | None,
) -> tuple:
    """The pass's per-image state restricted to images ``rows``; batch-1 style statistics
    and masks are shared by every image and stay as they are."""

    def shared_or_rows(tensor: Tensor) -> Tensor:
        return tensor if tensor.shape[0] == 1 else take_rows(tensor, rows)

    return (
        take_rows(image, rows),
        take_rows(content, rows),
        {level: take_rows(value, rows) for level, value in anchors.items()},
        [
            {
                level: FeatureStats(shared_or_rows(item.mean), shared_or_rows(item.std))
                for level, item in per_style.items()
            }
            for per_style in stats
        ],
        None if masks is None else [shared_or_rows(mask) for mask in masks],
    )


def _offset(control: StepControl, first: int, total: int) -> StepControl:
    """``control`` as seen by a nested call whose pass 0 is pass ``first`` of ``total``."""

    def shifted(done: int, _nested_total: int):
        return control(first + done, total)

    return shifted


class StyleTransfer(nn.Module):
    """Encoder, decoders and the AdaIN pass; see :meth:`stylize`.

    Args:
        encoder: the VGG encoder (at least as deep as the deepest level used).
        decoders: one decoder per level it inverts.
        levels: the default pass, deepest first, e.g. ``("relu3_1",)`` (single-level)
            or ``("relu3_1", "relu2_1", "relu1_1")`` (multi-level).
        weight_files: the checkpoint files loaded, for :meth:`describe`.
        fast: channels_last memory format and bfloat16 weights and activations (where
            the device has native bf16 kernels, else float32); statistics are still
            accumulated in float32 by ``norms``. Casting the weights once beats autocast,
            which re-casts every weight at every call.
        cache_size: style statistics kept (entries of one image at one level); 0 disables.
        preset: the default preset of :meth:`stylize` (``"quality"`` or ``"realtime"``,
            see :mod:`models.adain.presets`).
    """

    def __init__(
        self,
        encoder: VGGEncoder,
        decoders: Mapping[str, Decoder],
        *,
        levels: Sequence[str] = DEFAULT_LEVELS,
        weight_files: Sequence[Path] = (),
        fast: bool = False,
        cache_size: int = 64,
        preset: str = "quality",
    ) -> None:
        super().__init__()
        self.encoder = encoder.eval().requires_grad_(False)
        self.decoders = nn.ModuleDict(dict(decoders)).eval().requires_grad_(False)
        for level in self.decoders:
            if LEVELS.index(level) > LEVELS.index(encoder.depth):
                raise ValueError(f"decoder {level} is deeper than the encoder ({encoder.depth})")
        self.levels = check_levels(levels, list(self.decoders))
        self.weight_files = [Path(path) for path in weight_files]
        self.fast = fast
        self.cache = StyleStatsCache(cache_size)
        self.preset = get_preset(preset)
        if fast:
            self.to(memory_format=torch.channels_last)

    @classmethod
    def from_pretrained(
        cls,
        search_path: Sequence[Path],
        *,
        device: str | torch.device = "cpu",
        levels: Sequence[str] | None = None,
        fast: bool = False,
        cache_size: int = 64,
        preset: str = "quality",
        manifest: Manifest | None = None,
    ) -> StyleTransfer:
        """Load the shared normalised VGG-19 (to relu3_1) and its three decoders.

        Each file is taken from the first folder of ``search_path`` that has it. When
        the AdaIN release's pair (``adain/vgg_normalised.pth``, ``adain/decoder.pth``,
        see ``atelier weights fetch adain-relu4_1``) is found too, its deeper encoder
        replaces the relu3_1 one and ``"relu4_1"`` becomes available as a level.
        ``levels`` sets the default pass (``DEFAULT_LEVELS`` when ``None``); ``preset``
        the default preset (``"quality"`` runs that pass at full resolution).

        Raises:
            WeightsNotFoundError: a file is in none of ``search_path`` (the message names
                the file, the folders and the ``atelier weights fetch`` command).
        """
        manifest = manifest or Manifest.load()
        encoder_path = resolve(ENCODER_FILE, search_path, manifest)
        decoder_paths = {
            level: resolve(name, search_path, manifest) for level, name in DECODER_FILES.items()
        }
        adain_pair = [
            find_file(name, search_path) for name in (ADAIN_ENCODER_FILE, ADAIN_DECODER_FILE)
        ]
        if all(adain_pair):
            # the release's VGG is the same normalised VGG-19, only deeper: it serves every level
            encoder_path = adain_pair[0]
            decoder_paths["relu4_1"] = adain_pair[1]
        encoder = VGGEncoder.from_state_dict(load_state_dict(encoder_path))
        decoders = {
            level: Decoder.from_state_dict(load_state_dict(path), level)
            for level, path in decoder_paths.items()
        }
        model = cls(
            encoder,
            decoders,
            levels=levels or DEFAULT_LEVELS,
            weight_files=[encoder_path, *decoder_paths.values()],
            fast=fast,
            cache_size=cache_size,
            preset=preset,
        )
        return model.to(device)

    @property
    def device(self) -> torch.device:
        return next(self.encoder.parameters()).device

    def describe(self) -> dict[str, Any]:
        """What is loaded: mode, default levels and preset, weight files, device, precision."""
        return {
            "name": "adain",
            "mode": "single-level" if len(self.levels) == 1 else "multi-level",
            "levels": list(self.levels),
            "preset": self.preset.name,
            "weight_files": [str(path) for path in self.weight_files],
            "device": str(self.device),
            "fast": self.fast,
            "dtype": str(self._compute_dtype()).removeprefix("torch."),
        }

    def _compute_dtype(self) -> torch.dtype:
        """bfloat16 on the fast path where the device has native bf16 kernels, else float32."""
        return torch.bfloat16 if self.fast and bf16_supported(self.device) else torch.float32

    def _ready(self) -> torch.dtype:
        """Cast the networks to the compute dtype once (after a device move); return it."""
        dtype = self._compute_dtype()
        if self.encoder.layers[0].weight.dtype != dtype:
            self.to(dtype)
        return dtype

    def _prepare(self, image: Tensor) -> Tensor:
        image = image.to(self.device, self._compute_dtype())
        return image.contiguous(memory_format=torch.channels_last) if self.fast else image

    def style_stats(self, style: Tensor, levels: Sequence[str]) -> dict[str, FeatureStats]:
        """Statistics of a style image at ``levels``, from the cache when seen before."""

        def compute(image: Tensor, missing: list[str]) -> dict[str, FeatureStats]:
            features = self.encoder(self._prepare(image), missing)
            return {level: FeatureStats.of(features[level]) for level in missing}

        mode = f"{self.device}|fast={self.fast}"
        return self.cache.get_or_compute(style, levels, mode, compute)

    @torch.inference_mode()
    def stylize(
        self,
        content: Tensor,
        styles: Sequence[Tensor],
        *,
        style_weights: Sequence[float] | None = None,
        alpha: float = 1.0,
        preserve_color: bool = False,
        masks: Sequence[Tensor] | None = None,
        levels: Sequence[str] | None = None,
        preset: str | None = None,
        control: StepControl | None = None,
    ) -> Tensor:
        """Render ``content`` in the style of ``styles``.

        Args:
            content: RGB images in ``[0, 1]``.
            styles: one or more style images, each with batch 1 (shared by every
                content image) or B (one per content image); any size.
            style_weights: one non-negative weight per style (normalised to sum 1);
                the styles' statistics are interpolated. Default: equal weights.
                Not combined with ``masks``.
            alpha: content-style trade-off on the features, in ``[0, 1]``
                (0 reconstructs the content, 1 is full style).
            preserve_color: transfer luminance only and keep the content's chroma.
            masks: one mask per style, values in ``[0, 1]``; each style is applied
                where its mask is largest (and >= 0.5), with statistics per region;
                elsewhere the content is kept.
            levels: the pass to run instead of the preset's, deepest first.
            preset: ``"quality"`` or ``"realtime"`` (default: the model's preset): the
                pass and the working resolution, see :mod:`models.adain.presets`.
            control: asked before each level's pass which images are still wanted
                (:class:`~models.control.StepControl`); the others stop there and the
                output holds the kept ones only, each as it would have been without it.

        Shape:
            - content: ``(B, 3, H, W)``, any ``H, W``
            - styles: each ``(1 or B, 3, h, w)``
            - masks: each ``(1 or B, 1, H, W)``
            - output: ``(B, 3, H, W)`` float32 in ``[0, 1]``, on the model's device.
        """
        preset = self.preset if preset is None else get_preset(preset)
        if levels is None:
            levels = preset.levels or self.levels
        levels = check_levels(levels, list(self.decoders))
        if alpha == 0.0:
            levels = levels[-1:]  # every pass is anchored to the photo: only the last one shows
        weights = self._check_arguments(content, styles, style_weights, alpha, masks)
        content = content.to(self.device, torch.float32)
        full_content, full_masks = content, masks
        content = preset.downscale(content)
        downscaled = content is not full_content
        if masks is not None and downscaled:
            masks = [preset.downscale(mask.to(self.device, torch.float32)) for mask in masks]
        styles = [style.to(self.device, torch.float32) for style in styles]
        original_styles = styles
        if downscaled:  # the style's textures at the photo's working scale
            scale = content.shape[-1] / full_content.shape[-1]
            styles = [scale_image(style, scale, min_side=MIN_STYLE_SIDE) for style in styles]
        small_styles = styles
        if preserve_color:
            styles = [luminance(style).contiguous() for style in styles]
        image = luminance(content) if preserve_color else content
        image, (height, width) = pad_to_multiple(
            image, max(level_stride(level) for level in levels)
        )
        padded_masks = None
        if masks is not None:
            pad = (0, image.shape[-1] - width, 0, image.shape[-2] - height)
            padded_masks = [
                F.pad(mask.to(self.device, torch.float32), pad, mode="replicate") for mask in masks
            ]
        self._ready()
        stats = [self.style_stats(style, levels) for style in styles]
        batch = content.shape[0]
        kept = torch.arange(batch)  # the input rows still in the batch
        detail_levels = preset.detail_levels if downscaled else ()
        passes = len(levels) + len(detail_levels)
        image = self._prepare(image)
        anchors = self.encoder(image, set(levels)) if alpha < 1.0 else {}
        for done, level in enumerate(levels):
            rows = wanted_rows(control, done, passes)
            if rows is not None:
                image, content, anchors, stats, padded_masks = _take_images(
                    rows, image, content, anchors, stats, padded_masks
                )
                kept = kept[rows]
                batch = image.shape[0]
                if batch == 0:
                    return image[..., :height, :width].float()
            features = self.encoder.encode(image, level)
            level_stats = [item[level] for item in stats]
            if padded_masks is None and level not in anchors:  # AdaIN folded into the decoder
                scale, shift = adain_affine(features, level_stats, weights=weights, alpha=alpha)
                image = self.decoders[level].forward_linear(
                    features, torch.diag_embed(scale), shift
                )
                continue
            labels = None
            if padded_masks is not None:
                labels = region_labels(padded_masks, features.shape[-2:], batch)
            restyled = transfer(
                features,
                level_stats,
                weights=weights,
                labels=labels,
                alpha=alpha,
                anchor=anchors.get(level),
            )
            image = self.decoders[level](restyled)
        if not detail_levels:  # the last call: after the last pass
            rows = wanted_rows(control, passes, passes)
            if rows is not None:
                image, content = image[rows.to(image.device)], content[rows.to(content.device)]
                kept = kept[rows]
        output = image[..., :height, :width].float().clamp(0.0, 1.0).contiguous()
        if preserve_color:
            output = with_chroma_of(output, content)
        if not downscaled:
            return output

        def kept_rows(tensor: Tensor) -> Tensor:  # batch-1 inputs are shared by every row
            return tensor if tensor.shape[0] == 1 else tensor[kept.to(tensor.device)]

        full_content = kept_rows(full_content)
        if full_masks is not None:
            full_masks = [kept_rows(mask.to(self.device, torch.float32)) for mask in full_masks]
        detail = detail_band(full_content, content)
        if preset.texture_fill and alpha > 0.0:
            labels = None
            if full_masks is not None:
                labels = region_labels(full_masks, detail.shape[-2:], detail.shape[0])
            pairs = zip(original_styles, small_styles, strict=True)
            matched = matched_detail(
                detail,
                [(kept_rows(style), kept_rows(small)) for style, small in pairs],
                weights=weights,
                labels=labels,
            )
            detail = torch.lerp(detail, matched, alpha)
        output = restore_detail(output, detail)
        if not detail_levels:
            return output
        return self.stylize(
            output,
            [kept_rows(style) for style in original_styles],
            style_weights=style_weights,
            alpha=alpha,
            preserve_color=preserve_color,
            masks=full_masks,
            levels=detail_levels,
            preset="quality",
            control=None if control is None else _offset(control, len(levels), passes),
        )

    @staticmethod
    def _check_arguments(
        content: Tensor,
        styles: Sequence[Tensor],
        style_weights: Sequence[float] | None,
        alpha: float,
        masks: Sequence[Tensor] | None,
    ) -> list[float] | None:
        """Validate :meth:`stylize`'s arguments; return the normalised weights."""
        if content.ndim != 4 or content.shape[1] != 3:
            raise ValueError(f"content must be (B, 3, H, W), got {tuple(content.shape)}")
        batch, _, height, width = content.shape
        if len(styles) == 0:
            raise ValueError("at least one style image is needed")
        for index, style in enumerate(styles):
            if style.ndim != 4 or style.shape[1] != 3 or style.shape[0] not in (1, batch):
                raise ValueError(
                    f"style {index} must be (1 or {batch}, 3, h, w), got {tuple(style.shape)}"
                )
            if min(style.shape[-2:]) < MIN_STYLE_SIDE:
                raise ValueError(
                    f"style {index} is {tuple(style.shape[-2:])}; "
                    f"style images need at least {MIN_STYLE_SIDE} px on each side"
                )
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"alpha must be in [0, 1], got {alpha}")
        if masks is not None:
            if style_weights is not None:
                raise ValueError(
                    "style_weights and masks cannot be combined: masks choose the style"
                )
            if len(masks) != len(styles):
                raise ValueError(
                    f"got {len(masks)} masks for {len(styles)} styles; need one per style"
                )
            for index, mask in enumerate(masks):
                if (
                    mask.ndim != 4
                    or mask.shape[1] != 1
                    or mask.shape[0] not in (1, batch)
                    or mask.shape[-2:] != (height, width)
                ):
                    raise ValueError(
                        f"mask {index} must be (1 or {batch}, 1, {height}, {width}), got {tuple(mask.shape)}"
                    )
            return None
        if style_weights is None:
            return [1.0 / len(styles)] * len(styles)
        if len(style_weights) != len(styles):
            raise ValueError(f"got {len(style_weights)} style weights for {len(styles)} styles")
        weights = [float(weight) for weight in style_weights]
        if any(not math.isfinite(w) or w < 0 for w in weights) or max(weights) <= 0:
            raise ValueError(f"style weights must be finite, >= 0 and not all 0, got {weights}")
        # w_i / sum(w) computed as (w_i / max w) / sum(w / max w): the sum of the scaled
        # weights lies in [1, n], so it cannot overflow (1e308 + 1e308 would be inf).
        peak = max(weights)
        scaled = [w / peak for w in weights]
        total = math.fsum(scaled)
        return [w / total for w in scaled]
