"""Held-out compositional accuracy of the text-to-image DiT (GenEval-style).

Generates one image per held-out prompt (colour-shape combinations never seen in
training, ``models.shapes.eval_prompts``; ``--split train`` takes captions of the
training distribution instead, to separate composition from image quality) at guidance 1 and at the pipeline's default
guidance, with the same seeds, scores each with ``models.shapes.score_image`` and prints
the share of images satisfying every constraint of their caption, and per category
(colour, shape, count, size, position, relation; a category counts only the prompts that
constrain it), plus the gain of the default guidance over guidance 1. A third row draws the
default guidance without layout planning (``plan_layout=False``: the caption in one piece),
which is the model alone; ``--no-plan`` draws every row that way.

``--paraphrase`` draws the same held-out scenes from free phrasings of their captions
(``evaluation/paraphrase_heldout.py``: templates written before the prompt parser and
never used in its development) and scores each image against the scene's grammar
caption. Rows at the default guidance: grammar captions and paraphrases, planned and
unplanned (the model alone, given the understood caption), and the paraphrases drawn as
typed without prompt understanding (what a free prompt got before it). It also prints
how many paraphrases were understood exactly (``models.shapes.understand``) and how many
the grammar parser alone reads. Target: paraphrases within 0.05 of the
grammar captions, planned.

    .venv/bin/python benchmarks/dit_eval.py                       # default checkpoint
    .venv/bin/python benchmarks/dit_eval.py --checkpoint weights/dit-shapes32.safetensors
    .venv/bin/python benchmarks/dit_eval.py --n 200 --steps 25 --json
    .venv/bin/python benchmarks/dit_eval.py --split train --n 200 # in-distribution captions
    .venv/bin/python benchmarks/dit_eval.py --ground-truth        # scorer on renders: 1.00
    .venv/bin/python benchmarks/dit_eval.py --no-plan             # the model alone
    .venv/bin/python benchmarks/dit_eval.py --paraphrase          # free phrasing

Target: overall >= 0.80 at <= 50 steps with the default guidance, and a clear
gain over guidance 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from evaluation import CATEGORIES, EvalReport, evaluate_images
from models.shapes import eval_prompts, layout, parse_caption, render, to_tensor
from models.shapes.understand import Understanding, same_constraints, understand

ROOT = Path(__file__).resolve().parent.parent

#: ``generate(prompts, guidance_scale, seeds, plan_layout) -> (N, 3, 32, 32)`` in ``[0, 1]``.
Generate = Callable[[list[str], float, list[int], bool | None], torch.Tensor]


def load_pipeline(checkpoint: Path | None, device: str):
    """The project's ``TextToImage``, from ``checkpoint`` or the default search path."""
    from models.dit.pipeline import TextToImage

    if checkpoint is None:
        folders = [ROOT / "weights"]
        if os.environ.get("ATELIER_WEIGHTS_DIR"):
            folders.append(Path(os.environ["ATELIER_WEIGHTS_DIR"]))
        return TextToImage.from_pretrained(folders, device=device)
    return TextToImage.from_checkpoint(checkpoint, device=device)


def ground_truth_generator(seed: int) -> Generate:
    """A stand-in generator that renders a scene satisfying each prompt as understood
    (checks the scorer, and with paraphrases the understanding); a blank canvas for a
    prompt of which nothing was understood."""

    def generate(
        prompts: list[str], guidance_scale: float, seeds: list[int], plan_layout: bool | None
    ) -> torch.Tensor:
        del guidance_scale, plan_layout
        images = []
        for prompt, s in zip(prompts, seeds, strict=True):
            parsed = understand(prompt).parsed
            if parsed is None:
                images.append(torch.zeros(3, 32, 32))
            else:
                scene = layout(parsed, np.random.default_rng([seed, s]))
                images.append(to_tensor(render(scene)))
        return torch.stack(images)

    return generate


def understanding_figures(paraphrases: list[str], captions: list[str]) -> dict[str, float]:
    """Shares of paraphrases understood as their caption's scene, understood with no word
    ignored, and read at all by the grammar parser alone (what planning saw before)."""
    exact = complete = grammar = 0
    for text, caption in zip(paraphrases, captions, strict=True):
        understood = understand(text)
        parsed = understood.parsed
        exact += parsed is not None and same_constraints(parsed, parse_caption(caption))
        complete += understood.complete
        try:
            parse_caption(text)
            grammar += 1
        except ValueError:
            pass
    n = len(captions)
    return {
        "understood_exactly": exact / n,
        "nothing_ignored": complete / n,
        "grammar": grammar / n,
    }


def drawn_as_typed(pipe) -> None:
    """Make ``pipe`` draw every prompt as typed, without prompt understanding."""
    pipe.understand = lambda prompt: Understanding(prompt, None, ())


def run(
    generate: Generate,
    prompts: list[str],
    guidance: float,
    plan_layout: bool | None,
    seed: int,
    batch: int,
    captions: list[str] | None = None,
) -> tuple[EvalReport, float, torch.Tensor]:
    """Generate every prompt (``seed + i`` for prompt ``i``) and score it against its
    caption (``captions[i]``, the prompt itself by default); ``plan_layout`` is handed to
    ``generate`` (``None`` where it means nothing: ground-truth renders).

    Returns:
        the report, images per second, and the images ``(N, 3, 32, 32)``.
    """
    images = []
    start = time.perf_counter()
    for lo in range(0, len(prompts), batch):
        chunk = prompts[lo : lo + batch]
        seeds = [seed + lo + i for i in range(len(chunk))]
        images.append(generate(chunk, guidance, seeds, plan_layout).float().cpu())
    elapsed = time.perf_counter() - start
    stacked = torch.cat(images)
    return evaluate_images(stacked, captions or prompts), len(prompts) / elapsed, stacked


def save_grid(path: Path, images: torch.Tensor, prompts: list[str], columns: int = 8) -> None:
    """Write the first ``columns**2`` images, x4, framed green (ok) or red, and their captions."""
    from PIL import Image, ImageDraw

    from evaluation import score_image

    count = min(len(images), columns * columns)
    cell, frame = 32 * 4 + 4, 2
    rows = -(-count // columns)
    sheet = Image.new("RGB", (columns * cell, rows * cell))
    draw = ImageDraw.Draw(sheet)
    lines = []
    for i in range(count):
        x, y = (i % columns) * cell, (i // columns) * cell
        ok = score_image(images[i], prompts[i]).ok
        draw.rectangle([x, y, x + cell - 1, y + cell - 1], fill=(0, 160, 0) if ok else (200, 0, 0))
        pixels = (images[i].clamp(0, 1) * 255).round().to(torch.uint8).permute(1, 2, 0).numpy()
        tile = Image.fromarray(pixels).resize((128, 128), Image.NEAREST)
        sheet.paste(tile, (x + frame, y + frame))
        lines.append(f"{i:3d} {'ok  ' if ok else 'FAIL'} {prompts[i]}")
    path.parent.mkdir(parents=True, exist_ok=True)
    sheet.save(path)
    path.with_suffix(".txt").write_text("\n".join(lines) + "\n")


def _fmt(value: float | None) -> str:
    return "   -" if value is None else f"{value:.2f}"


def print_table(rows: list[dict], header: dict) -> None:
    print(" ".join(f"{k}={v}" for k, v in header.items()))
    names = ["overall", *CATEGORIES]
    texts = any("prompts" in row for row in rows)
    head = f"{'prompts':>10}  " if texts else ""
    pad = " " * len(head)
    print(
        f"{head}{'guidance':>8}  {'plan':>4}  "
        + "  ".join(f"{n:>8}" for n in names)
        + f"  {'img/s':>7}"
    )
    for row in rows:
        report = row["report"]
        values = [report["overall"], *(report["per_category"][c] for c in CATEGORIES)]
        cells = "  ".join(f"{_fmt(v):>8}" for v in values)
        plan = {True: "yes", False: "no", None: "-"}[row["plan_layout"]]
        name = f"{row.get('prompts', ''):>10}  " if texts else ""
        print(f"{name}{row['guidance']:>8g}  {plan:>4}  {cells}  {row['images_per_s']:>7.2f}")
    support = rows[0]["report"]["support"]
    print(
        f"{pad}{'prompts':>8}  {'':>4}  {rows[0]['report']['n']:>8}  "
        + "  ".join(f"{support[c]:>8}" for c in CATEGORIES)
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", type=Path, help="a DiT .safetensors (default: weights/)")
    parser.add_argument(
        "--n", type=int, default=200, help="held-out prompts (>= 200 for the issue)"
    )
    parser.add_argument("--steps", type=int, help="sampling steps (default: the pipeline's)")
    parser.add_argument(
        "--guidance", type=float, help="guidance to compare with 1 (default: the pipeline's)"
    )
    parser.add_argument("--sampler", default=None, help="sampler name (default: the pipeline's)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first image")
    parser.add_argument("--prompt-seed", type=int, default=0, help="seed of eval_prompts")
    parser.add_argument(
        "--split",
        choices=("heldout", "train"),
        default="heldout",
        help="held-out combinations (the issue's measure) or training-distribution captions",
    )
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--ground-truth", action="store_true", help="score renders, not the model")
    parser.add_argument(
        "--no-plan",
        action="store_true",
        help="every row without layout planning (the model alone); default: planned rows "
        "at guidance 1 and the default guidance, then the default guidance unplanned",
    )
    parser.add_argument(
        "--paraphrase",
        action="store_true",
        help="also draw the held-out scenes from free phrasings of their captions "
        "(evaluation/paraphrase_heldout.py) and score them beside the grammar captions",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    parser.add_argument(
        "--grid",
        type=Path,
        help="save a PNG sheet (+ .txt captions) per guidance, e.g. out/eval.png",
    )
    args = parser.parse_args(argv)
    if args.n < 1 or args.batch < 1:
        parser.error("--n and --batch must be >= 1")

    prompts = eval_prompts(args.n, seed=args.prompt_seed, split=args.split)
    header: dict = {"prompts": len(prompts), "split": args.split}
    texts = {"grammar": prompts}
    if args.paraphrase:
        from evaluation.paraphrase_heldout import heldout_paraphrases

        texts["paraphrase"] = heldout_paraphrases(prompts, seed=args.prompt_seed)
        header.update(understanding_figures(texts["paraphrase"], prompts))
    if args.ground_truth:
        generate = ground_truth_generator(args.seed)
        settings = [(1.0, None, name) for name in texts]
        header["model"] = "ground-truth renders"
    else:
        torch.manual_seed(args.seed)
        pipe = load_pipeline(args.checkpoint, args.device)
        steps = args.steps or pipe.defaults.steps
        default_guidance = args.guidance or pipe.defaults.guidance_scale
        sampler = args.sampler or pipe.default_sampler
        if args.paraphrase:
            plans = (False,) if args.no_plan else (True, False)
            settings = [(default_guidance, p, name) for p in plans for name in texts]
            settings.append((default_guidance, False, "typed"))
        elif args.no_plan:
            settings = [(1.0, False, "grammar"), (default_guidance, False, "grammar")]
        else:
            settings = [(g, p, "grammar") for g, p in ((1.0, True), (default_guidance, True))]
            settings.append((default_guidance, False, "grammar"))

        def generate(
            prompts: list[str], guidance_scale: float, seeds: list[int], plan_layout: bool
        ) -> torch.Tensor:
            return pipe.generate(
                prompts,
                steps=steps,
                guidance_scale=guidance_scale,
                seeds=seeds,
                sampler=sampler,
                plan_layout=plan_layout,
            )

        header.update(checkpoint=str(args.checkpoint or "default"), steps=steps, sampler=sampler)

    rows = []
    for guidance, plan_layout, name in settings:
        if name == "typed":
            drawn_as_typed(pipe)
        drawn = texts.get(name, texts.get("paraphrase"))
        report, speed, images = run(
            generate, drawn, guidance, plan_layout, args.seed, args.batch, captions=prompts
        )
        if name == "typed":
            del pipe.understand  # back to the class's method
        if args.grid is not None:
            stem = f"{args.grid.stem}-g{guidance:g}" + ("-noplan" if plan_layout is False else "")
            stem += "" if name == "grammar" else f"-{name}"
            save_grid(args.grid.with_stem(stem), images, prompts)
        print(  # progress, for long runs on a busy machine
            f"{name} guidance {guidance:g} plan {plan_layout}: overall {report.overall:.2f}"
            f" ({speed:.2f} images/s)",
            file=sys.stderr,
            flush=True,
        )
        row = {"guidance": guidance, "plan_layout": plan_layout, "images_per_s": speed}
        if args.paraphrase:
            row["prompts"] = name
        rows.append({**row, "report": report.as_dict()})
    result = {**header, "rows": rows}
    overall = [row["report"]["overall"] for row in rows]
    if args.paraphrase:
        result["paraphrase_minus_grammar"] = overall[1] - overall[0]
    elif len(rows) >= 2:
        result["gain_overall"] = overall[1] - overall[0]
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_table(rows, header)
        if "gain_overall" in result:
            print(
                f"gain of guidance {settings[1][0]:g} over 1: {result['gain_overall']:+.2f} (overall)"
            )
        if "paraphrase_minus_grammar" in result:
            kind = {True: "planned", False: "unplanned", None: "renders"}[rows[0]["plan_layout"]]
            gap = result["paraphrase_minus_grammar"]
            print(
                f"paraphrases minus grammar captions ({kind}): {gap:+.2f} overall (target >= -0.05)"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
