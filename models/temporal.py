"""Temporal consistency of a stylised clip: flow-guided blending inside the pyramid.

A frame stylised on its own flickers against its neighbours: the coarse stages of the
preset's pyramid (:mod:`models.adain.presets`) paint the large strokes on a 1/8-scale
image, where a pan of a few pixels is a fraction of a pixel, and each frame's strokes
land elsewhere. :class:`StageBlend` pulls, after each stage ``k``, every frame's image
``S_t^k`` towards the previous frame's carried along the input's motion:

.. math:: O_t^k = S_t^k + \\beta_k\\, m_t \\odot (\\mathrm{warp}(O_{t-1}^k, f_b) - S_t^k),
          \\qquad m_t = M_t \\exp(-\\gamma\\, \\overline{(I_t - \\mathrm{warp}(I_{t-1}, f_b))^2})

with ``f_b`` frame ``t``'s backward flow from the inputs (:mod:`models.flow`), resized
to the stage, ``M_t`` its forward-backward reliability mask, the exponential a guard
where the warped input does not match (lighting, flow errors; mean over the channels,
inputs in ``[0, 1]``), and ``beta_k`` the blend's strength (:func:`stage_strength`: full
at the coarse stages, 1/8 and 1/4 of the frame's size, a share of it at 1/2, zero at full
size; the warp of ``O_{t-1}^k`` bicubic). ``O_{t-1}^k`` is itself blended, so a stable
region keeps its strokes as it moves, and an occluded or new region takes the fresh stylisation at once; the later,
finer passes paint their detail anew on a start that moved with the content (blending
only the final output instead stabilises as much but blurs the strokes:
docs/style-transfer.md has the figures).

The state carried from frame to frame is 8-bit (the last input and each stage's last
image): a clip cut in chunks, stopped and resumed from the saved state, gives the same
frames as one uninterrupted run.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np
import torch

from models.flow import FlowEstimator, inside, reliable_mask, to_hwc, warp

#: The longest side of a video frame: a frame is painted whole by the preset's pyramid
#: (1080p fits; a frame's memory is that of one photo of its size).
MAX_FRAME_SIDE = 2048

#: The blend's strength at the coarse stages (at most 1/4 of the frame's size: both
#: presets' 1/8 and 1/4).
BLEND_STRENGTH = 0.9
BLENDED_FACTOR = 0.25
#: The blend at a stage between 1/4 and full size (both presets' 1/2 stage), as a
#: fraction of :data:`BLEND_STRENGTH`; the full-size stage is never blended. Chosen with
#: benchmarks/video.py (docs/style-transfer.md): on the slow pans where the coarse
#: stages alone left 0.55x per-frame's warping error, 0.3 brought it to 0.27-0.33x for
#: +4-8 % of Gram style loss; at the full strength it cost 4-16 %.
HALF_STAGE_SHARE = 0.3
#: The photometric guard's ``gamma`` (Lai et al.'s mask uses 50 on [0, 1] inputs).
PHOTOMETRIC_GAMMA = 50.0


def shrink(frame: torch.Tensor, scale: float = BLENDED_FACTOR) -> torch.Tensor:
    """``frame`` ``(3, H, W)`` uint8 shrunk by ``scale`` (area average; at least 16 px a
    side, DIS's least): what the motion is estimated on, and the input a clip's state
    keeps. The blend uses the motion at stages of at most that factor, so the flow of
    the full-size frames is never needed (it cost about a quarter of a 480p frame's
    stylisation)."""
    height, width = frame.shape[-2:]
    size = (max(16, round(width * scale)), max(16, round(height * scale)))
    small = cv2.resize(to_hwc(frame), size, interpolation=cv2.INTER_AREA)
    return torch.from_numpy(small).permute(2, 0, 1).contiguous()


@dataclass(frozen=True)
class FrameMotion:
    """How one frame moved from the frame before it: its backward flow ``(H, W, 2)`` and
    the blend weight ``m_t`` ``(H, W)`` in ``[0, 1]`` (module docstring, without ``beta``)."""

    backward: np.ndarray
    weight: np.ndarray

    @classmethod
    def between(
        cls, estimator: FlowEstimator, previous: torch.Tensor, frame: torch.Tensor
    ) -> FrameMotion:
        """The motion from ``previous`` to ``frame``, both as :func:`shrink` gives them
        (``(3, h, w)`` uint8): estimated at the scale of the stages the blend uses."""
        before, after = (to_hwc(image).astype(np.float32) / 255.0 for image in (previous, frame))
        backward, forward = estimator.flows(before, after)
        carried = warp(before, backward)
        mismatch = ((after - carried) ** 2).mean(-1)
        weight = reliable_mask(backward, forward) * np.exp(-PHOTOMETRIC_GAMMA * mismatch)
        return cls(backward, weight.astype(np.float32))

    def at(self, size: tuple[int, int]) -> FrameMotion:
        """The motion at a pyramid stage of ``size = (h, w)``: the flow resized and its
        vectors scaled by the same factors."""
        height, width = self.weight.shape
        if (height, width) == size:
            return self
        h, w = size
        # averaged when shrunk, interpolated when enlarged (the 1/2 stage of a motion
        # estimated at 1/4)
        mode = cv2.INTER_AREA if h <= height else cv2.INTER_LINEAR
        flow = cv2.resize(self.backward, (w, h), interpolation=mode)
        flow[..., 0] *= w / width
        flow[..., 1] *= h / height
        weight = cv2.resize(self.weight, (w, h), interpolation=mode)
        # a stage pixel whose match falls outside the stage's frame has nothing to carry
        # (the area average would blend in the border a little: streaks at an edge)
        return FrameMotion(flow, weight * inside(flow))


def stage_strength(strength: float, factor: float) -> float:
    """The blend's ``beta_k`` at a stage of ``factor`` of the frame's size: ``strength`` at
    the coarse stages (at most :data:`BLENDED_FACTOR`), :data:`HALF_STAGE_SHARE` of it
    between those and full size, zero at full size (the finest detail is painted anew)."""
    if factor <= BLENDED_FACTOR:
        return strength
    return strength * HALF_STAGE_SHARE if factor < 1.0 else 0.0


class StageBlend:
    """Flow-guided blending inside the pyramid: after each stage below full size, every
    frame's image is pulled towards the previous frame's image of the same stage,
    carried along the motion (:class:`FrameMotion` resized to the stage), with the
    stage's strength (:func:`stage_strength` of ``strength``). Stabilising the coarse
    stages keeps the large strokes in place as the content moves; the finer passes then
    paint their detail anew on a start that moved with the content.

    The carried image of each blended stage is kept as 8-bit (:attr:`carried`,
    ``(3, h, w)`` uint8 per stage index): the state a chunk hands to the next, exactly as a resumed
    run reads it back.
    """

    def __init__(
        self, strength: float = BLEND_STRENGTH, carried: dict[int, torch.Tensor] | None = None
    ) -> None:
        if not 0.0 <= strength < 1.0:
            raise ValueError(f"strength must be in [0, 1), got {strength}")
        self.strength = strength
        self.carried: dict[int, torch.Tensor] = dict(carried or {})
        self._motions: list[FrameMotion | None] = []

    def begin(self, motions: list[FrameMotion | None]) -> None:
        """The motions of the next batch's frames, in order (``None``: a frame with
        nothing before it, the clip's first)."""
        self._motions = list(motions)

    @property
    def motions(self) -> list[FrameMotion | None]:
        """The motions given to :meth:`begin` last."""
        return list(self._motions)

    def after_stage(self, stage: int, factor: float, image: torch.Tensor) -> torch.Tensor:
        """Blend stage ``stage``'s images ``(B, 3, h, w)`` in ``[0, 1]`` (the frames at
        ``factor`` of their size) frame by frame, in place; a blended stage's last image
        is carried on."""
        if len(self._motions) != image.shape[0]:
            raise ValueError(f"{image.shape[0]} frames but {len(self._motions)} motions given")
        strength = stage_strength(self.strength, factor)
        blended_stage = stage_strength(1.0, factor) > 0.0  # carried even at strength 0
        size = (image.shape[-2], image.shape[-1])
        for index, motion in enumerate(self._motions):
            previous = self.carried.get(stage)
            if strength > 0.0 and motion is not None and previous is not None:
                moved = motion.at(size)
                # bicubic: the carried image moves by a fraction of a pixel at every frame,
                # and bilinear sampling would blur it a little more each time
                source = to_hwc(previous).astype(np.float32) / 255.0
                carried = warp(source, moved.backward, cubic=True)
                frame = image[index].permute(1, 2, 0).float().cpu().numpy()
                blended = frame + (strength * moved.weight)[..., None] * (carried - frame)
                image[index] = torch.from_numpy(blended).permute(2, 0, 1).to(image)
            if blended_stage:  # only what a later frame blends with
                quantised = (image[index].float().clamp(0, 1) * 255 + 0.5).to(torch.uint8)
                self.carried[stage] = quantised.cpu().clone()
        return image
