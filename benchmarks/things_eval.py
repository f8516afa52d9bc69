"""Does the text-to-image model draw what people type? Judged by the project's classifier.

One run, at the pipeline's default sampler, steps and guidance (or those given), prints:

1. **By name**: one image per thing (every thing of the vocabulary, or the ``--things``
   the model trained on), prompt ``"a <name>"``; the judge's top-1 and top-5 over the
   whole vocabulary (targets top-5 >= 0.80, top-1 >= 0.60), and the Fréchet distance in
   the judge's feature space to real renders of the same things, beside the distance of
   a second real set to the first (what a perfect generator would score).
2. **Held-out phrasings**: the hand-written paraphrases no training caption holds
   ("kitty", "spaceship"), one image each; top-5 (target >= 0.8x the by-name top-5 of
   the same things).
3. **Colour variants**: ``"a <colour> <name>"`` for held-out (thing, colour) pairs; the
   share whose dominant hue (of the pixels that differ from the border's colour) is
   nearest the named colour's hue (target >= 0.80).
4. **Compositions** of 2-4 objects, drawn with layout planning: each planned cell is cut
   out and judged (top-5 of its object, target >= 0.60), and the planned cells hold
   something while the others stay empty (counts and positions, target >= 0.90).

The shapes prompts (target: served >= 0.95, as the shapes model) are measured by
``benchmarks/dit_eval.py --checkpoint weights/dit-things64.safetensors``.

    .venv/bin/python benchmarks/things_eval.py --checkpoint weights/dit-things64.safetensors
    .venv/bin/python benchmarks/things_eval.py --checkpoint runs/dit-things64/dit-things64.safetensors \\
        --judge runs/judge-things24.safetensors --things 24 --sheet docs/images/things-sheet.png

The judge's own held-out accuracy (on renders it never saw, stored in its checkpoint by
``python -m evaluation.judge train``) is printed first: the ceiling of the by-name figures.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812

from evaluation.judge import Judge, frechet_distance, load_judge, render_example
from evaluation.judge import read_metadata as read_judge_metadata
from models.shapes.planner import plan_regions
from models.things import (
    THING_HUES,
    ThingCaption,
    ThingSpec,
    colour_heldout,
    colourable,
    compose_caption,
    heldout_phrasings,
    thing,
    things,
)
from models.things.render import rgb_to_hsv

ROOT = Path(__file__).resolve().parent.parent
#: ``draw(prompts, seeds) -> (N, 3, 64, 64)`` in ``[0, 1]``, planned as served.
Draw = Callable[[list[str], list[int]], torch.Tensor]


def subset_keys(count: int | None) -> list[str]:
    """The things the model trained on: all, or ``count`` spread evenly over the
    vocabulary (what ``atelier train-dit --things N`` trains on)."""
    from models.things import subset_pool

    return [item.key for item in subset_pool(count)]


def hits(judge: Judge, images: torch.Tensor, keys: list[str]) -> list[bool]:
    """Per image, whether its thing is in the judge's top 5."""
    classes = {key: i for i, key in enumerate(judge.config.classes)}
    labels = torch.tensor([classes[key] for key in keys])
    with torch.inference_mode():
        top = torch.cat([judge(images[i : i + 256]) for i in range(0, len(images), 256)])
    return (top.topk(5, dim=1).indices == labels[:, None]).any(dim=1).tolist()


def judged(judge: Judge, images: torch.Tensor, keys: list[str]) -> dict[str, float]:
    """Top-1 / top-5 of ``images`` against the things ``keys`` over every class."""
    classes = {key: i for i, key in enumerate(judge.config.classes)}
    labels = torch.tensor([classes[key] for key in keys])
    with torch.inference_mode():
        top = torch.cat([judge(images[i : i + 256]) for i in range(0, len(images), 256)])
    top5 = top.topk(5, dim=1).indices
    return {
        "top1": float((top5[:, 0] == labels).float().mean()),
        "top5": float((top5 == labels[:, None]).any(dim=1).float().mean()),
        "n": float(len(keys)),
    }


def features(judge: Judge, images: torch.Tensor) -> np.ndarray:
    with torch.inference_mode():
        return torch.cat(
            [judge.features(images[i : i + 256]) for i in range(0, len(images), 256)]
        ).numpy()


def real_renders(keys: list[str], seed: int) -> torch.Tensor:
    rows = [render_example(key, np.random.default_rng([seed, i])) for i, key in enumerate(keys)]
    return torch.from_numpy(np.stack(rows)).permute(0, 3, 1, 2).contiguous()


def object_pixels(image: np.ndarray) -> np.ndarray:
    """``(H, W)`` bool: pixels farther than 0.15 (max over channels) from the median
    colour of the image's one-pixel border, taken as the background."""
    border = np.concatenate([image[0], image[-1], image[:, 0], image[:, -1]])
    background = np.median(border, axis=0)
    return np.abs(image - background).max(axis=-1) > 0.15


def nearest_colour(image: np.ndarray) -> str | None:
    """The named thing colour nearest the dominant hue of the object's saturated pixels."""
    mask = object_pixels(image)
    h, s, v = rgb_to_hsv(image)
    coloured = mask & (s >= 0.25) & (v >= 0.2)
    if coloured.sum() < 10:
        return None
    bins = np.bincount((h[coloured] // 10).astype(np.int64) % 36, weights=(s * v)[coloured])
    hue = (float(np.argmax(bins)) + 0.5) * 10

    def distance(name: str) -> float:
        gap = abs(THING_HUES[name] - hue) % 360
        return min(gap, 360 - gap)

    return min(THING_HUES, key=distance)


def cell_crops(image: torch.Tensor, masks: list[np.ndarray]) -> torch.Tensor:
    """Each mask's bounding box cut out and resized to 64 px: ``(K, 3, 64, 64)``."""
    crops = []
    for mask in masks:
        rows, cols = np.nonzero(mask)
        crop = image[:, rows.min() : rows.max() + 1, cols.min() : cols.max() + 1]
        crops.append(F.interpolate(crop[None], size=(64, 64), mode="bilinear")[0])
    return torch.stack(crops)


def compositions(keys: list[str], n: int, seed: int) -> list[tuple[str, list[str]]]:
    """``n`` captions of 2-4 objects (several things, counts, relations) with the thing
    of each planned object, in the planner's order."""
    rng = np.random.default_rng([seed, 0xC0])
    out = []
    for i in range(n):
        kind = i % 3
        picks = [keys[j] for j in rng.choice(len(keys), size=3, replace=False)]
        names = [thing(k).name for k in picks]
        if kind == 0:  # a relation
            relation = ("left of", "right of", "above", "below")[int(rng.integers(4))]
            caption = ThingCaption(
                (ThingSpec(picks[0], names[0]), ThingSpec(picks[1], names[1])), relation
            )
            objects = picks[:2]
        elif kind == 1:  # a count and another
            caption = ThingCaption(
                (ThingSpec(picks[0], names[0], 2), ThingSpec(picks[1], names[1]))
            )
            objects = [picks[0], picks[0], picks[1]]
        else:  # three things
            caption = ThingCaption(
                tuple(ThingSpec(k, name) for k, name in zip(picks, names, strict=True))
            )
            objects = picks
        out.append((compose_caption(caption), objects))
    return out


#: Per section, the (prompt, image, passed) rows the contact sheet shows.
Shown = dict[str, list[tuple[str, torch.Tensor, bool]]]


def save_sheet(path: Path, shown: Shown, per_section: int = 16, columns: int = 8) -> None:
    """The first ``per_section`` images of each section, x4, framed green (passed) or
    red, in rows; their prompts in a ``.txt`` beside it."""
    from PIL import Image, ImageDraw

    rows = [row for section in shown.values() for row in section[:per_section]]
    cell, frame = 64 * 4 + 4, 2
    sheet = Image.new("RGB", (columns * cell, -(-len(rows) // columns) * cell))
    draw = ImageDraw.Draw(sheet)
    lines = []
    for i, (prompt, image, passed) in enumerate(rows):
        x, y = (i % columns) * cell, (i // columns) * cell
        colour = (0, 160, 0) if passed else (200, 0, 0)
        draw.rectangle([x, y, x + cell - 1, y + cell - 1], fill=colour)
        pixels = (image.clamp(0, 1) * 255).round().to(torch.uint8).permute(1, 2, 0).numpy()
        sheet.paste(
            Image.fromarray(pixels).resize((256, 256), Image.NEAREST), (x + frame, y + frame)
        )
        lines.append(f"{i:3d} {'ok  ' if passed else 'FAIL'} {prompt}")
    path.parent.mkdir(parents=True, exist_ok=True)
    sheet.save(path)
    path.with_suffix(".txt").write_text("\n".join(lines) + "\n")


def run(draw: Draw, judge: Judge, keys: list[str], args: argparse.Namespace, shown: Shown) -> dict:
    from models.dit.pipeline import PLAN_STREAM

    report: dict = {}
    by_key = {item.key: item for item in things()}
    prompts = [compose_caption(ThingCaption((ThingSpec(k, by_key[k].name),))) for k in keys]
    images = draw(prompts, list(range(len(prompts))))
    report["by_name"] = judged(judge, images, keys)
    shown["by name"] = list(zip(prompts, images, hits(judge, images, keys), strict=True))
    real_a, real_b = real_renders(keys, 101), real_renders(keys, 202)
    report["frechet"] = {
        "generated_vs_real": frechet_distance(features(judge, images), features(judge, real_a)),
        "real_vs_real": frechet_distance(features(judge, real_b), features(judge, real_a)),
    }

    paraphrased = [(k, p) for k in keys for p in heldout_phrasings(by_key[k])]
    if paraphrased:
        para_keys = [k for k, _ in paraphrased]
        texts = [compose_caption(ThingCaption((ThingSpec(k, p),))) for k, p in paraphrased]
        para_images = draw(texts, list(range(len(texts))))
        para = judged(judge, para_images, para_keys)
        shown["held-out phrasings"] = list(
            zip(texts, para_images, hits(judge, para_images, para_keys), strict=True)
        )
        same = [keys.index(k) for k in para_keys]
        named = judged(judge, images[same], para_keys)
        report["heldout_phrasings"] = {**para, "by_name_top5_same_things": named["top5"]}

    pairs = [
        (k, c) for k in keys for c in THING_HUES if colour_heldout(k, c) and colourable(by_key[k])
    ][: args.colours]
    if pairs:
        texts = [
            compose_caption(ThingCaption((ThingSpec(k, by_key[k].name, colour=c),)))
            for k, c in pairs
        ]
        drawn = draw(texts, list(range(len(texts))))
        hue_hits = [
            nearest_colour(image.permute(1, 2, 0).numpy()) == colour
            for image, (_, colour) in zip(drawn, pairs, strict=True)
        ]
        report["colour_variants"] = {
            "named_hue": float(np.mean(hue_hits)),
            "n": float(len(hue_hits)),
        }
        shown["colours"] = list(zip(texts, drawn, hue_hits, strict=True))

    if len(keys) >= 3 and args.compositions:
        scenes = compositions(keys, args.compositions, args.seed)
        seeds = list(range(len(scenes)))
        drawn = draw([caption for caption, _ in scenes], seeds)
        crops, crop_keys, filled = [], [], []
        recognised_all: list[bool] = []
        for image, (caption, objects), seed in zip(drawn, scenes, seeds, strict=True):
            plan = plan_regions(caption, np.random.default_rng([seed, PLAN_STREAM]), 64)
            if plan is None or len(plan) != len(objects):
                filled.append(False)
                recognised_all.append(False)
                continue
            crops.append(cell_crops(image, [region.mask for region in plan]))
            crop_keys.extend(objects)
            recognised_all.append(all(hits(judge, crops[-1], objects)))
            taken = np.any([region.mask for region in plan], axis=0)
            pixels = object_pixels(image.permute(1, 2, 0).numpy())
            held = [pixels[region.mask].mean() > 0.03 for region in plan]
            stray = pixels[~taken].mean() < 0.03
            filled.append(all(held) and bool(stray))
        recognised = judged(judge, torch.cat(crops), crop_keys) if crops else {"top5": 0.0}
        shown["compositions"] = [
            (caption, image, ok and whole)
            for (caption, _), image, ok, whole in zip(
                scenes, drawn, recognised_all, filled, strict=True
            )
        ]
        report["compositions"] = {
            "object_top5_in_place": recognised["top5"],
            "counts_and_positions": float(np.mean(filled)),
            "n": float(len(scenes)),
        }
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--checkpoint", type=Path, default=ROOT / "weights" / "dit-things64.safetensors"
    )
    parser.add_argument(
        "--judge", type=Path, default=ROOT / "weights" / "judge-things64.safetensors"
    )
    parser.add_argument("--things", type=int, help="the --things N the model trained on")
    parser.add_argument("--colours", type=int, default=200, help="colour-variant prompts")
    parser.add_argument("--compositions", type=int, default=96)
    parser.add_argument("--steps", type=int)
    parser.add_argument("--guidance", type=float)
    parser.add_argument("--sampler")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--sheet", type=Path, help="write a contact sheet (PNG) here")
    args = parser.parse_args(argv)
    judge = load_judge(args.judge)
    keys = subset_keys(args.things)

    from models.dit.pipeline import TextToImage

    pipe = TextToImage.from_checkpoint(args.checkpoint)

    def draw(prompts: list[str], seeds: list[int]) -> torch.Tensor:
        out = [
            pipe.generate(
                prompts[i : i + args.batch],
                seeds=seeds[i : i + args.batch],
                steps=args.steps,
                guidance_scale=args.guidance,
                sampler=args.sampler,
            )
            for i in range(0, len(prompts), args.batch)
        ]
        return torch.cat(out)

    judge_info = read_judge_metadata(args.judge)
    report: dict = {"judge_heldout": {k: judge_info.get(f"heldout_{k}") for k in ("top1", "top5")}}
    start = time.perf_counter()
    shown: Shown = {}
    report.update(run(draw, judge, keys, args, shown))
    if args.sheet is not None:
        save_sheet(args.sheet, shown)
    report["seconds"] = time.perf_counter() - start
    report["things"] = len(keys)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for section, figures in report.items():
            print(f"{section}: {figures}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
