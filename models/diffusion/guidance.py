"""Guidance: how conditions steer the denoiser's prediction. Both are wrappers of a
denoiser ``model(x, t, cond) -> eps`` that a sampler calls as it would the network.

**Classifier-free guidance** (Ho & Salimans 2022, :func:`classifier_free_guidance`)
pushes the prediction under the prompt away from the one under the null condition (or a
negative prompt).

**Regional denoising** (:func:`regional_denoiser`): each region of an image denoised
under its own condition. A layout planner splits an image's prompt into regions, each
with a prompt of its own (one object at one place) and a pixel mask. At every step each
region's model call sees the image with the *other* regions hidden behind an empty
canvas at the current noise level, and the image's prediction blends the regions'
predictions by per-pixel weights. This is layout-grounded generation in the spirit of
MultiDiffusion (Bar-Tal et al. 2023) and LLM-grounded diffusion (Lian et al. 2023).
Hiding the other regions is what keeps objects from going missing (the ablation in
docs/text-to-image.md, commit 8cf890d): a call that sees another region's object seems
to take it for its own and leave its cell empty.

For image ``n`` and its regions ``m`` (``owner[m] = n``), at timestep ``t``:

.. math::
    x_m = x_n \\odot (1 - h_m) + (\\sqrt{\\bar\\alpha_t}\\, v
          + \\sqrt{1 - \\bar\\alpha_t}\\, z_m) \\odot h_m

    \\hat\\epsilon_n = \\sum_{m:\\,\\mathrm{owner}[m] = n} w_m \\odot \\epsilon_\\theta(x_m, t, c_m)

with ``h_m`` in {0, 1} the pixels region ``m`` must not see, ``v`` the clean value of an
empty canvas, ``z_m`` fixed standard noise and weights ``w_m >= 0`` that sum to 1 over an
image's regions at every pixel. One region per image with ``w = 1`` and ``h = 0`` is the
plain prediction.

The regional denoiser takes classifier-free guidance inside it, so each region is guided.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
from torch import Tensor

from models.control import concat_rows, take_rows
from models.diffusion.process import Denoiser, ScheduleOnDevice


def classifier_free_guidance(model: Denoiser, scale: float) -> Denoiser:
    """Wrap ``model`` so that it takes ``cond = (conditional, unconditional)``.

    .. math::
        \\hat\\epsilon = \\epsilon_u + w\\,(\\epsilon_c - \\epsilon_u)

    ``w = 1`` is the conditional prediction alone (the unconditional branch is skipped);
    ``w = 0`` is the unconditional one. Otherwise both branches run as *one* forward on
    the ``2B`` rows ``[x; x]`` with the conditions stacked by
    :func:`~models.control.concat_rows` (one launch sequence, larger matrices, instead
    of two); the rows do not interact, so this equals two forwards up to rounding. The
    unconditional condition is the learned null condition, or a negative prompt that
    replaces it. ``w`` is used as given: callers take it from resolved, checked options.
    """

    def guided(x: Tensor, t: Tensor, cond: tuple[Any, Any]) -> Tensor:
        conditional, unconditional = cond
        if scale == 1.0:
            return model(x, t, conditional)
        if scale == 0.0:
            return model(x, t, unconditional)
        both = model(x.repeat(2, *[1] * (x.dim() - 1)), t.repeat(2), concat_rows(cond))
        eps_cond, eps_uncond = both.chunk(2)
        return eps_uncond + scale * (eps_cond - eps_uncond)

    return guided


class Regions(NamedTuple):
    """The regions of a batch of ``N`` images, ``M >= N`` regions in all.

    Shape:
        cond: the inner model's condition for the ``M`` regions (handed through untouched).
        owner: ``(M,)`` long, the image each region belongs to; every image owns >= 1.
        weight: ``(M, 1, H, W)`` or ``(M, C, H, W)`` blend weights, summing to 1 per image.
        hide: ``(M, 1, H, W)`` or ``(M, C, H, W)``, 1 where the region's call sees the
            empty canvas instead of the image.
        noise: ``(M, C, H, W)`` the fixed noise ``z_m`` of hidden pixels.
        background: ``v``, the clean value of an empty canvas (e.g. -1 for black in
            ``[-1, 1]``): one float for every region, or ``(M,)`` one per region.
    """

    cond: Any
    owner: Tensor
    weight: Tensor
    hide: Tensor
    noise: Tensor
    background: float | Tensor = 0.0

    def take_rows(self, images: Tensor) -> Regions:
        """The regions of images ``images`` (``(K,)`` long, ascending), owners renumbered
        ``0..K-1``: what a sampler keeps when it drops images from its batch."""
        device = self.owner.device
        images = images.to(device)
        # every image owns a region, so M bounds the image count (no read of owner.max())
        position = torch.full((self.owner.numel(),), -1, device=device)
        position[images] = torch.arange(images.numel(), device=device)
        regions = (position[self.owner] >= 0).nonzero().flatten()  # (M',)
        return Regions(
            cond=take_rows(self.cond, regions),
            owner=position[self.owner[regions]],
            weight=self.weight[regions],
            hide=self.hide[regions],
            noise=self.noise[regions],
            background=(
                self.background[regions] if isinstance(self.background, Tensor) else self.background
            ),
        )

    def to(self, device: torch.device | str) -> Regions:
        """The tensors (not ``cond``) on ``device``."""
        return self._replace(
            owner=self.owner.to(device),
            weight=self.weight.to(device),
            hide=self.hide.to(device),
            noise=self.noise.to(device),
            background=(
                self.background.to(device)
                if isinstance(self.background, Tensor)
                else self.background
            ),
        )


def regional_denoiser(model: Denoiser, alpha_bar: Tensor) -> Denoiser:
    """Wrap ``model`` so that it takes ``cond = Regions(...)`` (see the module docstring).

    Nothing is read back from the device per call: ``alpha_bar`` is copied to the batch's
    device once, and the owners are checked against the batch once per ``Regions``
    object and batch size (a sampler passes the same one at every step until it drops
    rows).

    Args:
        model: ``model(x, t, cond) -> eps``, called once on the ``M`` region inputs with
            ``Regions.cond``; wrap classifier-free guidance inside to guide each region.
        alpha_bar: ``(T,)`` the schedule's cumulative signal fraction, indexed by ``t``.
    """
    schedule = ScheduleOnDevice(alpha_bar)
    checked: list[tuple[Tensor, int]] = []  # the last (owner, batch) found valid

    def denoise(x: Tensor, t: Tensor, regions: Regions) -> Tensor:
        owner = regions.owner
        if not (checked and checked[0][0] is owner and checked[0][1] == x.shape[0]):
            if owner.numel() and int(owner.max()) >= x.shape[0]:
                raise ValueError(f"a region's owner {int(owner.max())} is outside the batch")
            checked[:] = [(owner, x.shape[0])]
        region_t = t[owner]
        signal = schedule(x.device)[region_t].to(x.dtype).view(-1, *[1] * (x.dim() - 1))
        background = regions.background
        if isinstance(background, Tensor):
            background = background.to(x.dtype).view(-1, *[1] * (x.dim() - 1))
        canvas = signal.sqrt() * background + (1 - signal).sqrt() * regions.noise
        region_x = torch.lerp(x[owner], canvas.to(x.dtype), regions.hide.to(x.dtype))
        eps = model(region_x, region_t, regions.cond) * regions.weight.to(x.dtype)
        return torch.zeros_like(x).index_add_(0, owner, eps)

    return denoise
