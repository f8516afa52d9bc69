"""Optical flow between video frames, warping, occlusion masks and the warping error.

Conventions: frames are ``(3, H, W)`` uint8 RGB tensors (or ``(H, W, 3)`` uint8 arrays);
a flow is an ``(H, W, 2)`` float32 array of ``(dx, dy)`` in pixels. The *backward flow*
of frame ``t`` (:func:`backward_flow`) says where each of its pixels was in frame
``t - 1``: ``I_t(p) ~ I_{t-1}(p + f(p))``, so ``warp(O_{t-1}, f)`` brings frame
``t - 1``'s output onto frame ``t``.

Flow is OpenCV's DIS (Kroeger et al., ECCV 2016), computed on the grey frames.

Occlusion (Sundaram et al., ECCV 2010, as Ruder et al. 2016 use it): a pixel ``p`` of
frame ``t`` is reliable when the forward flow at its match ``q = p + f_b(p)`` leads back:

.. math:: |f_b(p) + f_f(q)|^2 \\le 0.01\\,(|f_b(p)|^2 + |f_f(q)|^2) + 0.5

and ``q`` lies inside the frame.

The warping error of a stylised clip (Lai et al., ECCV 2018) is the mean over frames of

.. math:: E_t = \\frac{\\sum_p M_t(p)\\, \\| O_t(p) - \\mathrm{warp}(O_{t-1}, f_b)(p) \\|^2}
                     {\\sum_p M_t(p)}

with outputs in ``[0, 1]`` and the mask ``M_t`` of reliable pixels, the flow taken from
the *input* frames (a stable stylisation moves with its content).
"""

from __future__ import annotations

from typing import Literal

import cv2
import numpy as np
import torch

Frame = torch.Tensor | np.ndarray
DisPreset = Literal["ultrafast", "fast", "medium"]

_PRESETS = {
    "ultrafast": cv2.DISOPTICAL_FLOW_PRESET_ULTRAFAST,
    "fast": cv2.DISOPTICAL_FLOW_PRESET_FAST,
    "medium": cv2.DISOPTICAL_FLOW_PRESET_MEDIUM,
}


def to_hwc(frame: Frame) -> np.ndarray:
    """``(3, H, W)`` uint8 tensor or ``(H, W, 3)`` array -> contiguous ``(H, W, 3)`` array."""
    if isinstance(frame, torch.Tensor):
        return np.ascontiguousarray(frame.permute(1, 2, 0).cpu().numpy())
    return np.ascontiguousarray(frame)


def _grey(frame: Frame) -> np.ndarray:
    image = to_hwc(frame)
    if image.dtype != np.uint8:
        image = np.clip(image * 255.0 + 0.5, 0, 255).astype(np.uint8)
    return cv2.cvtColor(image, cv2.COLOR_RGB2GRAY)


class FlowEstimator:
    """DIS optical flow (one OpenCV instance; not thread-safe: one per thread).

    The default preset is ``medium``: on a pan across the shared photos shrunk to 1/4
    (what the video blend estimates the motion on), its mean error was 0.09-0.44 px of
    the full frame against ``fast``'s 0.21-0.75, for 8-11 ms a pair of 480p frames
    against 4-7 (docs/style-transfer.md, Video).
    """

    def __init__(self, preset: DisPreset = "medium") -> None:
        self.preset = preset
        self._dis = cv2.DISOpticalFlow.create(_PRESETS[preset])

    def flow(self, source: Frame, target: Frame) -> np.ndarray:
        """The flow ``f`` with ``source(p) ~ target(p + f(p))``: ``(H, W, 2)`` float32."""
        flow: np.ndarray = self._dis.calc(_grey(source), _grey(target), None)  # type: ignore[call-overload]  # cv2's stubs lack the None output array
        return flow

    def flows(self, previous: Frame, current: Frame) -> tuple[np.ndarray, np.ndarray]:
        """``(backward, forward)``: frame ``t``'s pixels in ``t - 1``, and ``t - 1``'s in ``t``."""
        return self.flow(current, previous), self.flow(previous, current)


def warp(image: Frame, flow: np.ndarray, *, cubic: bool = False) -> np.ndarray:
    """``image`` sampled at ``p + flow(p)`` (bilinear, or bicubic with ``cubic``: what an
    image carried along from frame to frame needs, bilinear sampling blurring it a little
    more at each sub-pixel move; outside the frame: the border).

    Shape:
        - image: ``(3, H, W)`` tensor or ``(H, W, C)`` array; flow: ``(H, W, 2)``.
        - output: ``(H, W, C)`` array of ``image``'s dtype.
    """
    source = to_hwc(image)
    height, width = flow.shape[:2]
    grid_x, grid_y = np.meshgrid(
        np.arange(width, dtype=np.float32), np.arange(height, dtype=np.float32)
    )
    map_x = grid_x + flow[..., 0]
    map_y = grid_y + flow[..., 1]
    mode = cv2.INTER_CUBIC if cubic else cv2.INTER_LINEAR
    return cv2.remap(source, map_x, map_y, mode, borderMode=cv2.BORDER_REPLICATE)


def reliable_mask(backward: np.ndarray, forward: np.ndarray) -> np.ndarray:
    """Pixels of frame ``t`` whose backward flow is confirmed by the forward flow and
    lands inside frame ``t - 1`` (see the module docstring): ``(H, W)`` float32 in {0, 1}."""
    forward_at_match = warp(forward, backward)
    round_trip = backward + forward_at_match
    lhs = (round_trip**2).sum(-1)
    rhs = 0.01 * ((backward**2).sum(-1) + (forward_at_match**2).sum(-1)) + 0.5
    mask: np.ndarray = ((lhs <= rhs) & (inside(backward) > 0)).astype(np.float32)
    return mask


def inside(flow: np.ndarray) -> np.ndarray:
    """Where ``p + flow(p)`` lies inside the frame: ``(H, W)`` float32 in {0, 1}."""
    height, width = flow.shape[:2]
    grid_x, grid_y = np.meshgrid(np.arange(width), np.arange(height))
    match_x = grid_x + flow[..., 0]
    match_y = grid_y + flow[..., 1]
    within = (match_x >= 0) & (match_x <= width - 1) & (match_y >= 0) & (match_y <= height - 1)
    mask: np.ndarray = within.astype(np.float32)
    return mask


def shift_flow(shape: tuple[int, int], dx: float, dy: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """The exact ``(backward, reliable mask)`` of a camera pan whose frame ``t`` shows the
    scene moved by ``(-dx, -dy)`` (the window moved by ``(dx, dy)``): ``f_b = (dx, dy)``
    everywhere, reliable where ``p + f_b`` is inside the frame."""
    height, width = shape
    backward = np.empty((height, width, 2), dtype=np.float32)
    backward[..., 0], backward[..., 1] = dx, dy
    return backward, reliable_mask(backward, -backward)


def warping_error(
    previous_output: Frame, output: Frame, backward: np.ndarray, mask: np.ndarray
) -> float:
    """``E_t`` of the module docstring for one pair of consecutive outputs (uint8 frames
    are read as ``[0, 1]``); ``nan`` when no pixel is reliable."""
    scale = 1 / 255.0 if to_hwc(output).dtype == np.uint8 else 1.0
    warped = warp(to_hwc(previous_output).astype(np.float32), backward) * scale
    current = to_hwc(output).astype(np.float64) * scale
    squared = ((current - warped) ** 2).sum(-1)
    total = float(mask.sum())
    return float((squared * mask).sum() / total) if total > 0 else float("nan")
