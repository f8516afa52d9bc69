"""Arbitrary style transfer with AdaIN (Huang & Belongie, 2017), single- or multi-level.

Single-level (the paper): ``decode_l(AdaIN(encode_l(content), encode_l(style)))``.
Multi-level (coarse to fine, as in WCT): stylise and decode at the deepest level, then
re-encode that image at the next shallower level, apply AdaIN again with the style's
statistics there, decode, and so on; each pass refines the textures at a finer scale.
A level may come back: ``DEFAULT_LEVELS`` runs relu3_1 -> relu2_1 twice, since each
decoder only approximately reproduces the statistics it was given and the second round
closes much of that gap (see benchmarks/adain_quality.py). Without ``levels`` a preset's
pyramid of WCT passes runs instead (:mod:`models.adain.presets`).

``alpha`` blends, at every pass, the restyled features with the *photo's* features at
that level, so ``alpha = 0`` gives the last level's plain reconstruction of the photo
(and not a chain of reconstructions whose errors add up).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any, Unpack

import torch
import torch.nn.functional as F  # noqa: N812
from torch import Tensor, nn

from models.adain.banded import MIN_SIDE, BandedRelu11, relu1_1_grid_features
from models.adain.color import luminance, with_chroma_of
from models.adain.large import PrintStylization
from models.adain.options import StyleKeywords, StyleOptions
from models.adain.presets import (
    BASE_SIDE,
    MIN_STYLE_SIDE,
    PRESETS,
    Preset,
    Transform,
    check_style_scale,
    get_preset,
    levels_preset,
    next_stage_start,
    resize,
    stage_size,
    style_at,
)
from models.adain.stats import (
    FeatureStats,
    StyleStatsCache,
    check_masks,
    content_key,
    convex_weights,
)
from models.adain.transfer import adain_affine, region_labels, transfer
from models.adain.whitening import CovarianceStats, grid_stride, wct_affine, wct_transfer
from models.checkpoints import load_state_dict
from models.control import StepControl, image_hook, take_rows, wanted_rows
from models.decoder import Decoder
from models.devices import bf16_supported, to_device
from models.disk_picture import Picture
from models.hub import Manifest, find_file, resolve
from models.temporal import MAX_FRAME_SIDE, StageBlend
from models.vgg import LEVELS, VGGEncoder, check_level, level_stride

#: A full-size multi-level AdaIN pass (``levels=DEFAULT_LEVELS``): the baseline that
#: benchmarks/adain_quality.py compares the presets with.
DEFAULT_LEVELS: tuple[str, ...] = ("relu3_1", "relu2_1", "relu3_1", "relu2_1")

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


def _stage_picture(image: Tensor, content: Tensor | None) -> Tensor:
    """A stage's image ``(B, 3, h, w)`` as a picture; with ``preserve_color`` (``content``
    given: the photos at full size) its luma with the photos' chroma at its size."""
    if content is None:
        return image
    return with_chroma_of(image, resize(content, (image.shape[-2], image.shape[-1])))


class _Rows:
    """The per-image state of a stylisation, restricted together when a step control
    drops images: tensors (or lists or dicts of them, or style statistics) of batch
    ``batch`` are per image; batch-1 ones are shared by every image and stay as they are."""

    def __init__(self, batch: int, **values: Any) -> None:
        self.batch = batch
        self.values = dict(values)

    def __getitem__(self, name: str) -> Any:  # values of many kinds, read by name
        return self.values[name]

    def __contains__(self, name: str) -> bool:
        return name in self.values

    def set(self, **values: Any) -> None:
        self.values.update(values)

    def take(self, rows: Tensor) -> None:
        """Keep images ``rows`` (positions in the current batch)."""
        batch = self.batch

        def restrict(value: Any) -> Any:
            if isinstance(value, Tensor):
                return value if value.shape[0] != batch else take_rows(value, rows)
            if isinstance(value, list | tuple):
                return type(value)(restrict(item) for item in value)
            if isinstance(value, dict):
                return {key: restrict(item) for key, item in value.items()}
            if isinstance(value, FeatureStats | CovarianceStats):
                return type(value)(*(restrict(item) for item in vars(value).values()))
            return value

        self.values = {name: restrict(value) for name, value in self.values.items()}
        self.batch = len(rows)


class StyleTransfer(nn.Module):
    """Encoder, decoders and the AdaIN pass; see :meth:`stylize`.

    Args:
        encoder: the VGG encoder (at least as deep as the deepest level used).
        decoders: one decoder per level it inverts.
        levels: an AdaIN pass at full size, deepest first, to run by default instead of
            the preset's pyramid, e.g. ``("relu3_1",)`` (single-level) or
            ``("relu3_1", "relu2_1", "relu1_1")`` (multi-level); ``None``: the preset.
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
        levels: Sequence[str] | None = None,
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
        self.levels = None if levels is None else check_levels(levels, list(self.decoders))
        self.weight_files = [Path(path) for path in weight_files]
        self.fast = fast
        self.cache: StyleStatsCache[FeatureStats | CovarianceStats] = StyleStatsCache(cache_size)
        self.preset = get_preset(preset)
        #: Photos with a longer side above this are painted by print-size octaves
        #: (:mod:`models.adain.large`) on a base of this side.
        self.base_side = BASE_SIDE
        if fast:
            self.to(memory_format=torch.channels_last)

    @classmethod
    def from_pretrained(
        cls,
        search_path: Sequence[Path],
        *,
        device: str | torch.device = "cpu",
        levels: Sequence[str] | None = None,
        fast: bool = True,
        cache_size: int = 64,
        preset: str = "quality",
        manifest: Manifest | None = None,
    ) -> StyleTransfer:
        """Load the shared normalised VGG-19 (to relu3_1) and its three decoders.

        Each file is taken from the first folder of ``search_path`` that has it. When
        the AdaIN release's pair (``adain/vgg_normalised.pth``, ``adain/decoder.pth``,
        see ``atelier weights fetch adain-relu4_1``) is found too, its deeper encoder
        replaces the relu3_1 one and ``"relu4_1"`` becomes available as a level.
        ``levels`` sets an AdaIN default pass (``None``: the preset's pyramid); ``preset``
        the default preset (``"quality"``, see :mod:`models.adain.presets`). ``fast``: the
        fast path, as the service and the command line run it (see the class); pass
        ``fast=False`` for the float32 reference (e.g. an encoder for a metric).

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
        adain_encoder, adain_decoder = adain_pair
        if adain_encoder and adain_decoder:
            # the release's VGG is the same normalised VGG-19, only deeper: it serves every level
            encoder_path = adain_encoder
            decoder_paths["relu4_1"] = adain_decoder
        encoder = VGGEncoder.from_state_dict(load_state_dict(encoder_path))
        decoders = {
            level: Decoder.from_state_dict(load_state_dict(path), level)
            for level, path in decoder_paths.items()
        }
        model = cls(
            encoder,
            decoders,
            levels=levels,
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
        """What is loaded: mode, the default passes (the model's own ``levels``, else its
        preset's, coarse stage first) and preset, weight files, device, precision."""
        levels = list(self.levels if self.levels is not None else self.preset.levels)
        return {
            "name": "adain",
            "mode": "single-level" if len(levels) == 1 else "multi-level",
            "levels": levels,
            "preset": self.preset.name,
            "weight_files": [str(path) for path in self.weight_files],
            "device": str(self.device),
            "fast": self.fast,
            "dtype": str(self._compute_dtype()).removeprefix("torch."),
        }

    def resolve_passes(self, levels: Sequence[str] | None, preset: str | None) -> Preset:
        """What :meth:`stylize` runs: ``levels`` at full size when given, else ``preset``,
        else the model's own levels, else its preset; every level checked."""
        if levels is None and preset is None:
            levels = self.levels
        chosen = self.preset if preset is None else get_preset(preset)
        if levels is not None:
            chosen = levels_preset(check_levels(levels, list(self.decoders)))
        for stage in chosen.stages:
            check_levels(stage.levels, list(self.decoders))
        return chosen

    def full_size_passes(self, preset: str | None = None) -> float:
        """The work of stylising one image with ``preset`` (default: what :meth:`stylize`
        runs by default), in full-size-pass equivalents: each pass counts the share of
        the photo's pixels it runs on (:attr:`Preset.full_size_passes`)."""
        return self.resolve_passes(None, preset).full_size_passes

    def _compute_dtype(self) -> torch.dtype:
        """bfloat16 on the fast path where the device has native bf16 kernels, else float32."""
        return torch.bfloat16 if self.fast and bf16_supported(self.device) else torch.float32

    def decoder(self, level: str) -> Decoder:
        """The decoder of ``level`` (``self.decoders`` is a ``ModuleDict``)."""
        decoder = self.decoders[level]
        assert isinstance(decoder, Decoder)
        return decoder

    def ready(self) -> torch.dtype:
        """Cast the networks to the compute dtype once (after a device move); return it."""
        dtype = self._compute_dtype()
        if self.encoder.relu1_1_layers()[0].weight.dtype != dtype:
            self.to(dtype)
        return dtype

    def _prepare(self, image: Tensor) -> Tensor:
        image = image.to(self.device, self._compute_dtype())
        return image.contiguous(memory_format=torch.channels_last) if self.fast else image

    def style_stats(
        self,
        style: Tensor,
        levels: Sequence[str],
        transform: Transform = "adain",
        *,
        key: str | None = None,
    ) -> dict[str, FeatureStats | CovarianceStats]:
        """Statistics of a style image at ``levels`` for ``transform`` (``FeatureStats`` for
        AdaIN, ``CovarianceStats`` for WCT), from the cache when seen before (``key``: see
        :meth:`StyleStatsCache.get_or_compute`)."""
        of: Callable[[Tensor], FeatureStats | CovarianceStats] = (
            CovarianceStats.of if transform == "wct" else FeatureStats.of
        )

        def compute(image: Tensor, missing: list[str]) -> dict[str, FeatureStats | CovarianceStats]:
            prepared = self._prepare(image)
            stride = grid_stride(*image.shape[-2:])
            if transform == "wct" and missing == ["relu1_1"] and stride > 1:
                # the covariance reads a grid of the map: make that grid only
                return {
                    "relu1_1": CovarianceStats.of(
                        relu1_1_grid_features(self.encoder, prepared, stride)
                    )
                }
            features = self.encoder(prepared, missing)
            return {level: of(features[level]) for level in missing}

        mode = f"{self.device}|fast={self.fast}|{transform}"
        return self.cache.get_or_compute(style, levels, mode, compute, key=key)

    def _host_key(self, given: Tensor, transform: str) -> str | None:
        """The cache key of a style image bound for a GPU, hashed from the host copy the
        caller gave (plus ``transform``, what was done to it on the device), so the
        prepared image is never copied back to be hashed. ``None`` (hash the prepared
        image, which is cheaper when smaller) when the model or the image is not split
        between host and device."""
        if self.device.type == "cpu" or given.device.type != "cpu" or self.cache.capacity == 0:
            return None
        return f"{content_key(given)}|{transform}"

    @torch.inference_mode()
    def stylize(
        self,
        content: Tensor,
        styles: Sequence[Tensor],
        *,
        masks: Sequence[Tensor] | None = None,
        levels: Sequence[str] | None = None,
        control: StepControl | None = None,
        blend: StageBlend | None = None,
        **keywords: Unpack[StyleKeywords],
    ) -> Tensor:
        """Render ``content`` in the style of ``styles``.

        Args:
            content: RGB images in ``[0, 1]``.
            styles: one or more style images, each with batch 1 (shared by every
                content image) or B (one per content image); any size.
            masks: one mask per style, values in ``[0, 1]``; each style is applied
                where its mask is largest (and >= 0.5), with statistics per region;
                elsewhere the content is kept. Not combined with ``style_weights``.
            levels: an AdaIN pass at full size to run instead of the preset, deepest
                first (``["relu3_1"]`` is the paper's single-level mode).
            control: asked before each pass which images are still wanted
                (:class:`~models.control.StepControl`); the others stop there and the
                output holds the kept ones only, each as it would have been without it.
                Its ``show`` hook, if any (:data:`~models.control.ShowImages`), is shown
                each stage's image as the stage finishes.
            blend: the images are consecutive frames of a video: after each stage of
                the pyramid, each is blended with the previous frame's along the motion
                (:class:`~models.temporal.StageBlend`, given the frames' motions). A
                preset's pyramid only, without masks or a step control; a frame is
                painted whole at any size up to ``MAX_FRAME_SIDE`` (never by print-size
                octaves).
            keywords: ``style_weights``, ``alpha``, ``preserve_color``, ``preset``,
                ``style_scale``: see :class:`~models.adain.options.StyleOptions`.

        Shape:
            - content: ``(B, 3, H, W)``, any ``H, W``
            - styles: each ``(1 or B, 3, h, w)``
            - masks: each ``(1 or B, 1, H, W)``
            - output: ``(B, 3, H, W)`` float32 in ``[0, 1]``, on the model's device.
        """
        options = StyleOptions(**keywords)
        alpha, preserve_color = options.alpha, options.preserve_color
        if blend is not None:
            self._check_frames(content, levels, masks, control)
        if blend is None and levels is None and max(content.shape[-2:]) > self.base_side:
            self._check_arguments(content, styles, options.style_weights, alpha, masks)
            if masks is not None:
                raise ValueError(
                    f"masks are supported up to {self.base_side} px on the longer side"
                )
            options = replace(options, style_scale=check_style_scale(options.style_scale))
            return self._stylize_large(content, styles, options, control)
        chosen = self.resolve_passes(levels, options.preset)
        if alpha == 0.0:
            chosen = chosen.last_pass()  # every pass is anchored to the photo
        weights = self._check_arguments(content, styles, options.style_weights, alpha, masks)
        style_scale = check_style_scale(options.style_scale)
        given_styles = list(styles)
        content = to_device(content, self.device, torch.float32)
        styles = [to_device(style, self.device, torch.float32) for style in styles]
        if preserve_color:
            styles = [luminance(style).contiguous() for style in styles]
        state = _Rows(
            content.shape[0],
            content=content,
            source=luminance(content) if preserve_color else content,
            styles=styles,
            masks=None
            if masks is None
            else [to_device(m, self.device, torch.float32) for m in masks],
        )
        self.ready()
        total, done = chosen.passes, 0
        show = image_hook(control)
        for stage_index, stage in enumerate(chosen.stages):
            size = stage_size((content.shape[-2], content.shape[-1]), stage.factor)
            photo = resize(state["source"], size)
            if "previous" in state:
                start = next_stage_start(photo, state["previous"], state["previous_photo"])
            else:
                start = photo
            stage_styles = [
                style_at(style, max(size), style_scale, min_side=MIN_STYLE_SIDE)
                for style in state["styles"]
            ]
            prepared = f"side={max(size)}|scale={style_scale!r}|luminance={preserve_color}"
            stats = [
                self.style_stats(
                    style, stage.levels, chosen.transform, key=self._host_key(given, prepared)
                )
                for style, given in zip(stage_styles, given_styles, strict=True)
            ]
            stage_masks = None
            if state["masks"] is not None:
                stage_masks = [resize(mask, size) for mask in state["masks"]]
            state.set(stats=stats, stage_masks=stage_masks, photo=photo)
            image = self._stage(
                start, stage.levels, chosen.transform, state, weights, alpha, control, done, total
            )
            if image is None:  # every image was cancelled
                return content[:0]
            if blend is not None:
                image = blend.after_stage(stage_index, stage.factor, image)
            done += len(stage.levels)
            if show is not None:  # the stage's picture, to a watcher (a live preview)
                chroma = state["content"] if preserve_color else None
                show(done, total, partial(_stage_picture, image, chroma))
            state.set(previous=image, previous_photo=state["photo"])
        rows = wanted_rows(control, total, total)
        if rows is not None:
            state.take(rows)
        output: Tensor = state["previous"].float().clamp(0.0, 1.0).contiguous()
        if preserve_color:
            output = with_chroma_of(output, state["content"])
        return output

    def print_stylization(
        self, content: Picture, styles: Sequence[Tensor], **keywords: Unpack[StyleKeywords]
    ) -> PrintStylization:
        """A print-size stylisation of one photo ``(3, H, W)`` larger than :attr:`base_side`
        (:mod:`models.adain.large`), to run step by step; a GPU batches sixteen tiles a step.
        ``keywords``: as :meth:`stylize` takes them (no masks)."""
        return self._print_session(content, styles, StyleOptions(**keywords))

    def _print_session(
        self, content: Picture, styles: Sequence[Tensor], options: StyleOptions
    ) -> PrintStylization:
        self.resolve_passes(None, options.preset)
        return PrintStylization(
            content,
            styles,
            replace(options, style_scale=check_style_scale(options.style_scale)),
            base_side=self.base_side,
            tiles_per_step=1 if self.device.type == "cpu" else 16,
        )

    def _stylize_large(
        self,
        content: Tensor,
        styles: Sequence[Tensor],
        options: StyleOptions,
        control: StepControl | None,
    ) -> Tensor:
        """:meth:`stylize` of photos larger than :attr:`base_side`: one print-size stylisation
        per image, in turn; ``control`` is asked before each step (and at the end) with
        the steps of every image counted, and the images it drops stop there."""
        batch = content.shape[0]
        kept = list(range(batch))
        outputs: dict[int, Tensor] = {}
        total = done = 0
        for index in range(batch):
            if index not in kept:
                continue
            own = [style[index if style.shape[0] > 1 else 0][None] for style in styles]
            session = self._print_session(content[index], own, options)
            total = session.steps * batch
            for step in [step for phase in session.phases() for step in phase]:
                kept = self._still_wanted(control, done, total, kept, outputs)
                if index not in kept:
                    break
                session.accept(step, session.run_step(self, step))
                done += 1
            else:
                picture = session.result()
                outputs[index] = picture.read()
                picture.close()
            done = (index + 1) * session.steps
        kept = self._still_wanted(control, total, total, kept, outputs)
        if not kept:
            return content[:0].to(self.device, torch.float32)
        return torch.stack([outputs[index] for index in kept]).to(self.device).float() / 255.0

    @staticmethod
    def _still_wanted(
        control: StepControl | None,
        done: int,
        total: int,
        kept: list[int],
        outputs: dict[int, Tensor],
    ) -> list[int]:
        rows = wanted_rows(control, done, total)
        if rows is None:
            return kept
        still = [kept[position] for position in rows.tolist()]
        for index in set(kept) - set(still):
            outputs.pop(index, None)
        return still

    def _stage(
        self,
        start: Tensor,
        levels: tuple[str, ...],
        transform: Transform,
        state: _Rows,
        weights: Sequence[float],
        alpha: float,
        control: StepControl | None,
        done: int,
        total: int,
    ) -> Tensor | None:
        """One stage's passes on ``start`` ``(B, 3, h, w)``; ``None`` when no image is left.
        Rows that ``control`` drops leave ``state`` (and the image) as they go.

        With ``alpha < 1`` the photo at this scale is encoded once at every level of the
        stage (the anchors); a stage that starts from the photo itself takes its first
        pass's features from them instead of encoding the same image again."""
        multiple = max(level_stride(level) for level in levels)
        image, (height, width) = pad_to_multiple(start, multiple)
        padding = (0, image.shape[-1] - width, 0, image.shape[-2] - height)
        anchors = {}
        if alpha < 1.0:  # the photo at this scale, padded like the image
            padded_photo = pad_to_multiple(state["photo"], multiple)[0]
            anchors = self.encoder(self._prepare(padded_photo), set(levels))
        photo_start = start is state["photo"] and levels[0] in anchors
        image = self._prepare(image)
        for index, level in enumerate(levels):
            rows = wanted_rows(control, done + index, total)
            if rows is not None:
                state.take(rows)
                image = take_rows(image, rows)
                anchors = {key: take_rows(value, rows) for key, value in anchors.items()}
                if image.shape[0] == 0:
                    return None
            batch = image.shape[0]
            level_stats = [item[level] for item in state["stats"]]
            folded = state["stage_masks"] is None and level not in anchors
            if folded and transform == "wct" and self._banded_fits(image, level):
                image = self._banded_wct(image, level_stats, weights, alpha)
                continue
            if index == 0 and photo_start:
                features = anchors[level]
            else:
                features = self.encoder.encode(image, level)
            if folded:  # the affine map folded into the decoder
                if transform == "wct":
                    matrix, shift = wct_affine(features, level_stats, weights=weights, alpha=alpha)
                else:
                    scale, shift = adain_affine(features, level_stats, weights=weights, alpha=alpha)
                    matrix = torch.diag_embed(scale)
                image = self.decoder(level).forward_linear(features, matrix, shift)
                continue
            labels = None
            if state["stage_masks"] is not None:
                padded = [F.pad(m, padding, mode="replicate") for m in state["stage_masks"]]
                labels = region_labels(padded, features.shape[-2:], batch)
            restyle = wct_transfer if transform == "wct" else transfer
            restyled = restyle(
                features,
                level_stats,
                weights=weights,
                labels=labels,
                alpha=alpha,
                anchor=anchors.get(level),
            )
            image = self.decoders[level](restyled)
        return image[..., :height, :width].float().clamp(0.0, 1.0)

    def _banded_fits(self, image: Tensor, level: str) -> bool:
        """Whether a pass runs as :class:`~models.adain.banded.BandedRelu11`: a relu1_1 pass
        on a CPU whose covariance is read on a grid (past ``COVARIANCE_POSITIONS``). Below
        that the covariance needs the whole map anyway, and the banded form would make it
        twice; a GPU holds the whole map at no such cost and would pay a launch per band."""
        return (
            level == "relu1_1"  # a pass's level always has its decoder (resolve_passes)
            and image.device.type == "cpu"
            and min(image.shape[-2:]) >= MIN_SIDE
            and grid_stride(*image.shape[-2:]) > 1
        )

    def _banded_wct(
        self,
        image: Tensor,
        level_stats: Sequence[CovarianceStats],
        weights: Sequence[float],
        alpha: float,
    ) -> Tensor:
        """A folded relu1_1 WCT pass without the full-size map (:mod:`models.adain.banded`)."""
        banded = BandedRelu11(self.encoder, self.decoder("relu1_1"))
        padded = banded.padded_input(image)
        grid = banded.grid_features(padded, grid_stride(*image.shape[-2:]))
        matrix, shift = wct_affine(grid, level_stats, weights=weights, alpha=alpha, scratch=True)
        return banded.decode(padded, matrix, shift)

    def warm_up(self) -> float:
        """Stylise one small image with each preset, so that the first request does not
        pay for lazy initialisation (CUDA context, cuDNN's algorithm choice, the
        allocator's pools); returns the seconds it took."""
        start = time.perf_counter()
        generator = torch.Generator().manual_seed(0)
        content = torch.rand(1, 3, 64, 64, generator=generator)
        style = torch.rand(1, 3, 64, 64, generator=generator)
        for name in PRESETS:
            self.stylize(content, [style], preset=name)
        return time.perf_counter() - start

    def _check_frames(
        self,
        content: Tensor,
        levels: Sequence[str] | None,
        masks: Sequence[Tensor] | None,
        control: StepControl | None,
    ) -> None:
        """A video's frames run a preset's pyramid whole (a frame is painted in one piece,
        never by print-size octaves), up to ``MAX_FRAME_SIDE``."""
        if levels is not None or masks is not None:
            raise ValueError("a video's frames take a preset, without levels or masks")
        if max(content.shape[-2:]) > MAX_FRAME_SIDE:
            raise ValueError(f"a video's frames are at most {MAX_FRAME_SIDE} px on the longer side")
        if control is not None:
            raise ValueError("a video's frames are stylised whole (no step control)")

    @staticmethod
    def _check_arguments(
        content: Tensor,
        styles: Sequence[Tensor],
        weights: Sequence[float] | None,
        alpha: float,
        masks: Sequence[Tensor] | None,
    ) -> tuple[float, ...]:
        """Validate :meth:`stylize`'s arguments; return the convex style weights (equal
        ones with masks, which choose the style per pixel instead)."""
        if content.ndim != 4 or content.shape[1] != 3:
            raise ValueError(f"content must be (B, 3, H, W), got {tuple(content.shape)}")
        batch, _, height, width = content.shape
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
            check_masks(len(masks), len(styles), weighted=weights is not None)
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
        return convex_weights(weights, len(styles))
