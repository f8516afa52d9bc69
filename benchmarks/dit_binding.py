"""How much of a caption the DiT uses: word order (relations) and colour-shape binding.

Renders ``--n`` training-split scenes per probe, noises each at the given timesteps and
denoises it under the true caption, a contrast caption and the null condition (same
noise for all three), then prints the x0 errors and the *used share*
``(contrast - true) / (null - true)`` (``evaluation.probe``):

- order: relation scenes; the contrast exchanges the two phrases ("A left of B" ->
  "B left of A"), so only word order tells the captions apart.
- binding: two-object scenes of different shapes; the contrast exchanges the shapes.

A share near 0 means the model ignores that part of the caption; the layout of a scene is
decided at the highest noise levels, so those rows matter most.
Noise is drawn per timestep in the order given, so runs compare for the same
``--timesteps`` and ``--seed``.

    .venv/bin/python benchmarks/dit_binding.py
    .venv/bin/python benchmarks/dit_binding.py --checkpoint runs/dit-pos/dit-shapes32.safetensors
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

from evaluation.probe import (
    denoising_errors,
    swap_order,
    swap_shapes,
    used_share,
)
from models.diffusion import get_schedule
from models.shapes import (
    compose_caption,
    layout,
    parse_caption,
    render,
    sample_caption,
    to_tensor,
)

ROOT = Path(__file__).resolve().parent.parent


def probe_captions(kind: str, n: int, seed: int) -> tuple[list[str], list[str]]:
    """``n`` training captions of the probe's kind and their contrasts."""
    rng = np.random.default_rng([seed, 0xB1D])
    captions, contrasts = [], []
    while len(captions) < n:
        if kind == "order":
            parsed = sample_caption(rng, "train", family="relation")
            contrast = swap_order(parsed)
        else:
            parsed = sample_caption(rng, "train", family="several")
            if len(parsed.objects) != 2 or parsed.objects[0].shape == parsed.objects[1].shape:
                continue
            contrast = swap_shapes(parsed)
        captions.append(compose_caption(parsed))
        contrasts.append(compose_caption(contrast))
    return captions, contrasts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoint", type=Path, help="default: weights/dit-shapes32")
    parser.add_argument("--n", type=int, default=256, help="scenes per probe")
    parser.add_argument("--timesteps", type=int, nargs="+", default=[990, 950, 900, 800, 600])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.n < 1:
        parser.error("--n must be >= 1")

    from models.dit.checkpoint import load_dit
    from models.text_encoder import MiniLMEncoder

    checkpoint = args.checkpoint or ROOT / "weights" / "dit-shapes32.safetensors"
    model = load_dit(checkpoint)
    if max(args.timesteps) >= model.config.num_timesteps or min(args.timesteps) < 0:
        parser.error(f"--timesteps must lie in [0, {model.config.num_timesteps})")
    encoder = MiniLMEncoder()
    alpha_bar = get_schedule(model.config.schedule, model.config.num_timesteps)
    print(f"checkpoint: {checkpoint}  ({args.n} training-split scenes per probe)")
    print(f"{'probe':>8} {'t':>5} {'true':>8} {'contrast':>9} {'null':>8} {'used share':>11}")
    for kind in ("order", "binding"):
        captions, contrasts = probe_captions(kind, args.n, args.seed)
        rng = np.random.default_rng([args.seed, 0x5CE])
        scenes = [layout(parse_caption(c), rng) for c in captions]
        x0 = torch.stack([to_tensor(render(scene)) for scene in scenes]) * 2 - 1
        conditions = {
            "true": encoder.encode(captions),
            "contrast": encoder.encode(contrasts),
            "null": model.null_condition(len(captions)),
        }
        generator = torch.Generator().manual_seed(args.seed)
        errors = denoising_errors(
            model, x0, conditions, alpha_bar, args.timesteps, generator=generator
        )
        for step, row in errors.items():
            print(
                f"{kind:>8} {step:>5} {row['true']:8.4f} {row['contrast']:9.4f} "
                f"{row['null']:8.4f} {used_share(row, 'contrast'):11.2f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
