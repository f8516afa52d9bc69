"""Does the DiT use what a caption says? Denoising errors under contrasting captions.

For images ``x0`` of known captions, the same noisy input ``x_t`` is denoised under the
true caption, under a *contrast* caption that keeps every word but changes one binding,
and under the null condition. With ``a = sqrt(alpha_bar_t)``, ``s = sqrt(1 - alpha_bar_t)``
and the model's ``v`` (or ``eps``) turned into an estimate ``x0_hat``::

    error(cond) = mean((x0_hat(x_t, t, cond) - x0) ** 2)
    used share  = (error(contrast) - error(true)) / (error(null) - error(true))

The used share is the part of what the caption gains over no caption that the contrasted
binding carries: about 0 when the model ignores it (the contrast denoises as well as the
truth), about 1 when the contrast is as useless as no caption at all.

Contrasts: :func:`swap_order` exchanges the two phrases of a relation ("A left of B" ->
"B left of A": word order only), :func:`swap_shapes` exchanges the shapes of two objects
("a red circle and a blue square" -> "a red square and a blue circle": colour-shape
binding).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch
from torch import Tensor

from models.diffusion.process import add_noise, to_x0
from models.dit.model import DiT
from models.shapes.captions import ParsedCaption
from models.text_encoder import TextCondition


def swap_order(parsed: ParsedCaption) -> ParsedCaption:
    """``"A <rel> B"`` -> ``"B <rel> A"``; only relation captions have an order to swap."""
    if parsed.relation is None:
        raise ValueError("swap_order needs a relation caption")
    first, second = parsed.objects
    return ParsedCaption((second, first), parsed.relation)


def swap_shapes(parsed: ParsedCaption) -> ParsedCaption:
    """Exchange the shapes of the first two objects, which must differ in shape."""
    if len(parsed.objects) < 2 or parsed.objects[0].thing == parsed.objects[1].thing:
        raise ValueError("swap_shapes needs two objects of different shapes")
    first, second, *rest = parsed.objects
    return ParsedCaption(
        (
            dataclasses.replace(first, thing=second.thing),
            dataclasses.replace(second, thing=first.thing),
            *rest,
        ),
        parsed.relation,
    )


@torch.no_grad()
def denoising_errors(
    model: DiT,
    x0: Tensor,
    conditions: dict[str, TextCondition],
    alpha_bar: Tensor,
    timesteps: Sequence[int],
    *,
    generator: torch.Generator,
) -> dict[int, dict[str, float]]:
    """Mean squared error of ``x0_hat`` per timestep and condition, with shared noise.

    Args:
        model: the DiT (its ``config.prediction`` says how to read its output).
        x0: clean images in ``[-1, 1]``, ``(B, C, H, W)``.
        conditions: named conditions, each for the ``B`` images.
        alpha_bar: the schedule ``(T,)``.
        timesteps: the noise levels to probe.
        generator: draws one noise tensor per timestep, used for every condition.

    Returns:
        ``{t: {name: error}}``.
    """
    errors: dict[int, dict[str, float]] = {}
    batch = x0.shape[0]
    for step in timesteps:
        t = torch.full((batch,), int(step), dtype=torch.long)
        alpha_bar_t = alpha_bar[t]
        noise = torch.randn(x0.shape, generator=generator, dtype=x0.dtype)
        x_t = add_noise(x0, noise, alpha_bar_t)
        errors[int(step)] = {}
        for name, cond in conditions.items():
            x0_hat = to_x0(model(x_t, t, cond), x_t, alpha_bar_t, model.config.prediction)
            errors[int(step)][name] = float(((x0_hat - x0) ** 2).mean())
    return errors


def used_share(errors: dict[str, float], contrast: str) -> float:
    """``(error[contrast] - error["true"]) / (error["null"] - error["true"])``."""
    gain = errors["null"] - errors["true"]
    return (errors[contrast] - errors["true"]) / gain if gain > 0 else float("nan")
