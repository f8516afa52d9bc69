"""``atelier generate "PROMPT"``: text to PNG files with the trained DiT (here, or on a
service with ``--server URL``: ``service.cli.remote``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from service.cli import remote
from service.cli.common import SAMPLING_FLAGS, add_where_to_run, given_options, print_understanding


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "generate",
        help="generate images from a text prompt",
        description="Sample images from the text-to-image DiT and write them as PNGs.",
    )
    parser.add_argument(
        "prompt",
        help='e.g. "a red circle to the left of a blue square"; the understood prompt, the '
        "words it did not use and the things the model has not learned to draw are printed "
        "on stderr",
    )
    parser.add_argument("-n", "--num-images", type=int, default=1, help="images to generate")
    parser.add_argument("--steps", type=int, help="sampling steps (default: the model's)")
    parser.add_argument("--guidance", type=float, help="guidance scale (default: the model's)")
    parser.add_argument("--seed", type=int, help="seed of the first image; image i uses seed + i")
    parser.add_argument("--sampler", help="ddpm, ddim or dpm++2m (default: the model's, ddpm)")
    parser.add_argument("--negative", help="negative prompt (replaces the null condition)")
    parser.add_argument(
        "--no-plan-layout",
        dest="plan_layout",
        action="store_false",
        help="draw a caption naming several objects in one piece, without planning one "
        "prompt per object and grid cell",
    )
    parser.add_argument("-o", "--output", type=Path, default=Path("."), help="output folder")
    parser.add_argument("--checkpoint", type=Path, help="a DiT .safetensors (default: weights/)")
    add_where_to_run(parser, here=run, there=remote.generate)


def run(args: argparse.Namespace) -> int:
    from models.diffusion.random import consecutive_seeds
    from models.dit.pipeline import TextToImage
    from models.images import save_image
    from service.cli.settings import settings_from_args
    from service.workers.loading import checkpoint_hashes
    from service.workers.text_to_image import image_parameters

    if args.num_images < 1:
        raise SystemExit("error: -n must be >= 1")
    try:
        seeds = consecutive_seeds(args.seed, args.num_images)
    except ValueError as exc:
        raise SystemExit(f"error: --seed: {exc}") from None
    settings = settings_from_args(args)
    device = args.device or settings.device_list()[0]
    if args.checkpoint is not None:
        pipe = TextToImage.from_checkpoint(args.checkpoint, device=device)
    else:
        pipe = TextToImage.from_pretrained(settings.weight_search_path(), device=device)
    try:
        sampling = given_options(args, SAMPLING_FLAGS)
        options = pipe.defaults.resolve(plan_layout=args.plan_layout, **sampling)
    except ValueError as exc:
        raise SystemExit(f"error: {exc}") from None
    understanding = pipe.understand(args.prompt)
    print_understanding(understanding.caption, understanding.ignored, understanding.not_learned)
    images = pipe.sample(
        [understanding] * args.num_images,
        options,
        negative_prompts=[args.negative] * args.num_images,
        seeds=seeds,
    )
    provenance = {"model": "dit", "checkpoint_sha256": checkpoint_hashes(pipe.describe())}
    parameters = image_parameters(args.prompt, args.negative, options, understanding, provenance)
    args.output.mkdir(parents=True, exist_ok=True)
    for seed, image in zip(seeds, images, strict=True):
        path = save_image(image, args.output / f"seed{seed}.png", parameters | {"seed": seed})
        print(path)
    return 0
