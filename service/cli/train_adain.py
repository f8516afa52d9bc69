"""``atelier train-adain``: train an AdaIN decoder with the paper's objective.

Example (fine-tune the shared relu3_1 decoder for stylisation)::

    atelier train-adain --content photos/ --styles paintings/ --steps 2000 --batch 4 \
        --size 256 --init-decoder ../shared/weights/vgg19-normalised/feature_invertor_conv3_1.pth \
        --out runs/adain
    atelier train-adain ... --out runs/adain --resume      # continue a stopped run
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from models.adain.pipeline import ENCODER_FILE
from models.adain.train import TrainConfig, train
from models.checkpoints import load_state_dict
from models.hub import Manifest, WeightsNotFoundError, resolve
from models.vgg import VGGEncoder
from service.cli import config_from_flags
from service.cli.settings import settings_from_args


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "train-adain",
        help="train an AdaIN decoder (content + style loss, Adam)",
        description="Train a decoder for AdaIN style transfer (Huang & Belongie 2017).",
    )
    parser.add_argument("--content", type=Path, required=True, help="folder of content images")
    parser.add_argument("--styles", type=Path, required=True, help="folder of style images")
    parser.add_argument("--out", type=Path, default=Path("runs/adain"), help="checkpoint folder")
    parser.add_argument("--level", default="relu3_1", help="level the decoder inverts")
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=8, help="pairs per step")
    parser.add_argument("--size", type=int, default=256, help="crop side in pixels")
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--lr-decay", type=float, default=5e-5)
    parser.add_argument("--content-weight", type=float, default=1.0)
    parser.add_argument("--style-weight", type=float, default=10.0)
    parser.add_argument("--checkpoint-every", type=int, default=500)
    parser.add_argument("--init-decoder", type=Path, help="start from this decoder checkpoint")
    parser.add_argument("--resume", action="store_true", help="continue the run in --out")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", help="torch device (default: the first of ATELIER_DEVICES)")
    parser.add_argument("--weights", type=Path, help="folder holding the VGG encoder")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    search_path = [args.weights] if args.weights else settings.weight_search_path()
    try:
        config = config_from_flags(
            TrainConfig,
            args,
            content_dir=args.content,
            style_dir=args.styles,
            out_dir=args.out,
            batch_size=args.batch,
            device=args.device or settings.device_list()[0],
        )
        encoder_path = resolve(ENCODER_FILE, search_path, Manifest.load())
        encoder = VGGEncoder.from_state_dict(load_state_dict(encoder_path))
        history = train(config, encoder)
    except (ValueError, FileNotFoundError) as exc:  # includes WeightsNotFoundError
        print(f"error: {exc}", file=sys.stderr)
        return 1 if isinstance(exc, WeightsNotFoundError) else 2
    if history:
        print(f"loss {history[0]:.4f} -> {history[-1]:.4f} over {len(history)} steps")
    print(config.decoder_path)
    return 0
