"""Sampling options of text-to-image: the defaults and their one resolution.

A request's ``None`` fields are resolved here once (by the HTTP route, the CLI, or
``TextToImage.generate`` for library callers), so a default lives in one place (the
model's :class:`GenerateDefaults`) and every option, the guidance scale included, is
checked once; ``TextToImage.sample`` and the samplers take the resulting
:class:`GenerateOptions` as given. What ``sample`` takes per image besides (negative
prompts, seeds, a step control) is typed once by :class:`SampleKeywords`, which
``sample``, the service's protocol for it and its fake take as keywords.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypedDict

from models.control import StepControl

__all__ = ["GenerateDefaults", "GenerateOptions", "SampleKeywords"]


class SampleKeywords(TypedDict, total=False):
    """The keyword options of ``TextToImage.sample`` (``**keywords:
    Unpack[SampleKeywords]``), each optional and per image; their meaning is documented
    there."""

    negative_prompts: Sequence[str | None] | None
    seeds: Sequence[int] | None
    control: StepControl | None


@dataclass(frozen=True)
class GenerateOptions:
    """Resolved options of one ``generate`` call; images with equal options can share a
    batch (it is their batch key)."""

    steps: int
    guidance_scale: float
    sampler: str
    plan_layout: bool


@dataclass(frozen=True)
class GenerateDefaults:
    """A model's defaults and limits.

    Args:
        steps: model evaluations per image when not given.
        guidance_scale: CFG scale when not given.
        sampler: the default sampler, one of ``samplers``.
        plan_layout: whether captions naming several objects are planned by default.
        samplers: the sampler names the model offers.
        max_steps: the most steps (the schedule's length).
    """

    steps: int
    guidance_scale: float
    sampler: str
    plan_layout: bool
    samplers: tuple[str, ...]
    max_steps: int

    def resolve(
        self,
        *,
        steps: int | None = None,
        guidance_scale: float | None = None,
        sampler: str | None = None,
        plan_layout: bool | None = None,
    ) -> GenerateOptions:
        """Fill ``None`` fields from the defaults and check every field.

        Raises:
            ValueError: steps outside ``[1, max_steps]``, a negative guidance scale or an
                unknown sampler (the message names the field).
        """
        steps = self.steps if steps is None else int(steps)
        if not 1 <= steps <= self.max_steps:
            raise ValueError(f"steps must be in [1, {self.max_steps}], got {steps}")
        scale = self.guidance_scale if guidance_scale is None else float(guidance_scale)
        if not scale >= 0:  # also refuses NaN
            raise ValueError(f"guidance_scale must be >= 0, got {scale}")
        sampler = self.sampler if sampler is None else sampler
        if sampler not in self.samplers:
            raise ValueError(f"sampler: {sampler!r} is not one of {list(self.samplers)}")
        plan_layout = self.plan_layout if plan_layout is None else bool(plan_layout)
        return GenerateOptions(steps, scale, sampler, plan_layout)
