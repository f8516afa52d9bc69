"""What each part of layout planning buys, on the held-out prompts of ``dit_eval.py``.

Three ways to draw the same prompts with the same seeds, at the pipeline's defaults:

- ``unplanned``: the caption in one piece (``plan_layout=False``), the model alone;
- ``regions, no hiding``: planned one-object prompts blended by cell, but every region's
  model call sees the whole image, other objects included;
- ``regions``: as served, each region sees the other objects' cells as empty canvas.

    .venv/bin/python benchmarks/dit_layout_ablation.py --n 200 --batch 100

It reuses ``dit_eval.py``'s generation and table: run as a script, Python puts the
script's own folder (``benchmarks/``) first on ``sys.path``, so the sibling imports as
``dit_eval``; the project itself comes from the installed package.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from dit_eval import load_pipeline, print_table, run

from models.shapes import eval_prompts


def without_hiding(pipe) -> None:
    """Make ``pipe`` plan and blend regions but show every region the whole image."""
    plan = pipe.regions

    def regions(*args, **kwargs):
        planned = plan(*args, **kwargs)
        return planned._replace(hide=torch.zeros_like(planned.hide))

    pipe.regions = regions


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", type=Path, help="a DiT .safetensors (default: weights/)")
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch", type=int, default=50)
    args = parser.parse_args(argv)

    prompts = eval_prompts(args.n)
    pipe = load_pipeline(args.checkpoint, "cpu")
    guidance = pipe.defaults.guidance_scale

    def generate(prompts, guidance_scale, seeds, plan_layout):
        return pipe.generate(
            prompts, guidance_scale=guidance_scale, seeds=seeds, plan_layout=plan_layout
        )

    rows = []
    for name, plan_layout, hide in (
        ("unplanned", False, True),
        ("regions, no hiding", True, False),
        ("regions", True, True),
    ):
        if not hide:
            without_hiding(pipe)
        report, speed, _ = run(generate, prompts, guidance, plan_layout, args.seed, args.batch)
        if not hide:
            del pipe.regions  # back to the class's method
        print(f"{name}: overall {report.overall:.2f}")
        rows.append(
            {
                "guidance": guidance,
                "plan_layout": plan_layout,
                "images_per_s": speed,
                "report": report.as_dict(),
            }
        )
    print()
    print_table(rows, {"prompts": len(prompts), "rows": "unplanned, no hiding, regions"})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
