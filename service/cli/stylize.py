"""``atelier stylize CONTENT STYLE [STYLE ...] -o OUT``: AdaIN style transfer on files.

Examples::

    atelier stylize photo.jpg starry.jpg -o out.png
    atelier stylize photo.jpg starry.jpg wave.jpg --style-weights 0.7,0.3 -o mix.png
    atelier stylize photo.jpg starry.jpg wave.jpg --mask left.png --mask right.png -o m.png
    atelier stylize photo.jpg scream.jpg --preserve-color --alpha 0.8 --levels relu3_1 -o o.png
    atelier stylize photo.jpg starry.jpg --preset realtime -o fast.png
    atelier stylize photo.jpg starry.jpg --style-scale 2 -o big-strokes.png
    atelier stylize photo_12mp.jpg starry.jpg --size 4000 -o print.png   # tile progress bar
    atelier stylize clip.mp4 starry.jpg -o painted.mp4   # a video: frame progress bar
    atelier stylize photo.jpg starry.jpg -o out.png --server http://gpu-box:8000  # remote

A video (MP4, MOV, WebM, MKV, animated GIF) is written in its own container at its frame
rate with its audio copied; ``--size`` scales its frames down (default: its own size).

The photo, the styles and the masks are decoded and resized as ``POST /v1/stylize``
decodes its uploads (:func:`prepare`: ``service.images.decode_image`` with the server's
limits), so the model is given the same tensors for the same request.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

import torch
from tqdm import tqdm

from models import video
from models.adain import StyleTransfer
from models.adain.options import StyleOptions
from models.adain.presets import MAX_STYLE_SCALE, MIN_STYLE_SCALE, PRESETS, styles_side
from models.adain.stats import convex_weights
from models.adain.video import CHUNK_FRAMES, stylize_clip
from models.control import StepControl
from models.disk_picture import in_memory
from models.hub import WeightsNotFoundError
from models.images import SUFFIXES, check_output_side, mask_from_rgb, save_image, to_float
from service.cli import remote
from service.cli.common import add_where_to_run
from service.cli.serve import tune_glibc_malloc
from service.cli.settings import settings_from_args
from service.errors import ServiceError
from service.images import ImageLimits, decode_image
from service.workers.loading import checkpoint_hashes

#: The longest side of a photo's output when --size is not given.
DEFAULT_SIZE = 512


def _weights(text: str) -> list[float]:
    try:
        return [float(item) for item in text.split(",")]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from exc


def _levels(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "stylize",
        help="paint a photo or a video in the style of one or more paintings",
        description="Paint a photo or a video in the style of one or more paintings, on "
        "normalised VGG-19 features: WCT in the presets (coarse to fine), AdaIN in a --levels "
        "pass; docs/style-transfer.md has every option.",
    )
    parser.add_argument("content", type=Path, help="the photo, or a video clip")
    parser.add_argument("styles", type=Path, nargs="+", help="one or more paintings")
    parser.add_argument(
        "-o",
        "--output",
        type=Path,
        required=True,
        help="output image (.png, .jpg or .webp), or video (the clip's own container)",
    )
    parser.add_argument("--alpha", type=float, default=1.0, help="style strength in [0, 1]")
    parser.add_argument("--style-weights", type=_weights, help="comma list, one weight per style")
    parser.add_argument("--preserve-color", action="store_true", help="keep the photo's colours")
    parser.add_argument(
        "--mask",
        type=Path,
        action="append",
        dest="masks",
        help="mask per style, read as its channel mean (white = that style); one per style",
    )
    parser.add_argument(
        "--size",
        type=int,
        help="longest side of the output (photo scaled down; default 512); above 1024 the "
        "photo is painted at its own resolution by print-size octaves, tile by tile. A "
        "video's frames: default its own size",
    )
    parser.add_argument(
        "--levels",
        type=_levels,
        help="pass to run, deepest first, e.g. relu3_1 (single-level) or relu3_1,relu2_1,relu1_1",
    )
    parser.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        default="quality",
        help="quality: the style matched at 1/8, 1/4, 1/2 and full size; realtime: the same "
        "scales with fewer, shallower passes (see docs/style-transfer.md)",
    )
    parser.add_argument(
        "--style-scale",
        type=float,
        default=1.0,
        help="size of the style's features (strokes, shapes) in the output, in "
        f"[{MIN_STYLE_SCALE:g}, {MAX_STYLE_SCALE:g}]: 1 keeps their size in the painting at "
        "the photo's size, 2 doubles it, 0.5 halves it",
    )
    parser.add_argument(
        "--quality",
        type=int,
        choices=range(1, 101),
        metavar="[1-100]",
        help="JPEG or WebP quality (default 92 and 90); PNG is lossless",
    )
    add_where_to_run(parser, here=run, there=remote.stylize)


def run(args: argparse.Namespace) -> int:
    try:
        data = args.content.read_bytes()
    except OSError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if video.looks_like_video(data):
        return run_video(args, data)
    del data
    args.size = DEFAULT_SIZE if args.size is None else args.size
    if args.output.suffix.lower() not in SUFFIXES:
        print(f"error: -o {args.output}: write one of {sorted(SUFFIXES)}", file=sys.stderr)
        return 2
    try:
        check_output_side(SUFFIXES[args.output.suffix.lower()], args.size)
    except ValueError as exc:
        print(f"error: -o {args.output}: {exc}", file=sys.stderr)
        return 2
    tune_glibc_malloc()  # a print-size photo's tiles reuse freed memory, as in the service
    model = _load_model(args)
    if model is None:
        return 1
    try:
        content, styles, masks = prepare(args, image_limits(args, args.size))
        large = max(content.shape[-2:]) > model.base_side and args.levels is None
        with tqdm(unit="tile" if large else "pass", disable=None, file=sys.stderr) as bar:
            output = model.stylize(
                content,
                styles,
                masks=masks,
                levels=args.levels,
                control=_progress(bar),
                **style_options(args).keywords(),
            )
    except (OSError, ValueError, ServiceError) as exc:
        print(f"error: {exc.message if isinstance(exc, ServiceError) else exc}", file=sys.stderr)
        return 2
    args.output.parent.mkdir(parents=True, exist_ok=True)
    save_image(output, args.output, _parameters(args, model, content), quality=args.quality)
    print(args.output)
    return 0


def style_options(args: argparse.Namespace) -> StyleOptions:
    """The stylisation options the flags name, as a photo and a video are painted with them."""
    return StyleOptions(
        style_weights=args.style_weights,
        alpha=args.alpha,
        preserve_color=args.preserve_color,
        preset=args.preset,
        style_scale=args.style_scale,
    )


def image_limits(args: argparse.Namespace, size: int) -> ImageLimits:
    """The server's image limits (the same settings), the longest side raised to ``size``
    (the command line has no ``max_side``)."""
    settings = settings_from_args(args)
    return ImageLimits(max_pixels=settings.max_pixels, max_side=max(settings.max_side, size))


def decode_file(path: Path, limits: ImageLimits, size: int | tuple[int, int]) -> torch.Tensor:
    """``path`` decoded and resized as an upload is (``service.images.decode_image``):
    ``(3, H, W)`` uint8; ``size`` a longer side, or ``(H, W)``."""
    return in_memory(decode_image(path.read_bytes(), limits, name=str(path), size=size))


def prepare(
    args: argparse.Namespace, limits: ImageLimits
) -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor] | None]:
    """The model's inputs for a photo, as the service prepares them for the same request
    (``service.execution.stylize.StylizeWork``): the photo resized to ``args.size``, the
    styles to ``styles_side(args.size)``, the masks to the photo's size and read as their
    channel mean. ``(1, 3, H, W)``, ``(1, 3, h_i, w_i)`` each, ``(1, 1, H, W)`` each, in
    [0, 1]."""
    content = decode_file(args.content, limits, args.size)
    styles = [decode_file(path, limits, styles_side(args.size)) for path in args.styles]
    masks = None
    if args.masks:
        height, width = content.shape[-2:]
        masks = [
            mask_from_rgb(to_float(decode_file(path, limits, (height, width))))[None]
            for path in args.masks
        ]
    return to_float(content)[None], [to_float(style)[None] for style in styles], masks


def _load_model(args: argparse.Namespace) -> StyleTransfer | None:
    settings = settings_from_args(args)
    device = args.device or settings.device_list()[0]
    try:
        return StyleTransfer.from_pretrained(settings.weight_search_path(), device=device)
    except WeightsNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None


def run_video(args: argparse.Namespace, data: bytes) -> int:
    """Stylise a clip chunk by chunk (``models.adain.video``) with a frame progress bar;
    write it in its own container, audio copied, the parameters in its metadata."""
    try:
        info = video.probe(data)
    except video.VideoError as exc:
        print(f"error: {args.content}: {exc}", file=sys.stderr)
        return 2
    if args.output.suffix.lower() not in (info.suffix(), *_ALIASES.get(info.suffix(), ())):
        print(
            f"error: -o {args.output}: a {info.container} clip is written as "
            f"{info.container}; name the output *{info.suffix()}",
            file=sys.stderr,
        )
        return 2
    if args.masks or args.levels:
        print("error: --mask and --levels are for photos, not video", file=sys.stderr)
        return 2
    model = _load_model(args)
    if model is None:
        return 1
    size = video.fit_size(info, args.size)
    try:
        limits = image_limits(args, max(size))
        styles = [
            to_float(decode_file(path, limits, styles_side(max(size))))[None]
            for path in args.styles
        ]
        options = style_options(args)
        segments = []
        chunks = video.frame_chunks(data, CHUNK_FRAMES, size=size)
        with tqdm(total=info.frames, unit="frame", disable=None, file=sys.stderr) as bar:
            for frames, _ in stylize_clip(model, chunks, styles, options):
                segments.append(video.encode_segment(frames, info))
                bar.update(frames.shape[0])
    except (OSError, ValueError, ServiceError) as exc:  # VideoError is a ValueError
        print(f"error: {exc.message if isinstance(exc, ServiceError) else exc}", file=sys.stderr)
        return 2
    parameters = {
        **{key: value for key, value in asdict(options).items() if key != "preset"},
        "size": list(size),
        "frames": info.frames,
        "model": "adain",
        **model.resolve_passes(None, args.preset).parameters(),
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    with args.output.open("wb") as out:
        video.assemble(
            segments, data, info, {"comment": json.dumps(parameters, sort_keys=True)}, out
        )
    print(args.output)
    return 0


#: Other suffixes a container's output may have.
_ALIASES = {".mp4": (".m4v",), ".mkv": (".mka",)}


def _progress(bar: tqdm) -> StepControl:
    """A step control that moves ``bar`` (passes, or a large photo's tiles) and keeps
    every image."""

    def control(done: int, total: int) -> None:
        bar.total = total
        bar.update(done - bar.n)

    return control


def _parameters(
    args: argparse.Namespace, model: StyleTransfer, content: torch.Tensor
) -> dict[str, object]:
    """The PNG text chunks the service writes for the same request."""
    description = model.describe()
    weights = args.style_weights
    return {
        "alpha": args.alpha,
        "style_weights": None if weights is None else list(convex_weights(weights, len(weights))),
        "preserve_color": args.preserve_color,
        "masks": len(args.masks or ()),
        "size": args.size,
        "style_scale": args.style_scale,
        "content_size": list(content.shape[-2:]),
        **{key: description[key] for key in ("levels", "mode", "dtype")},
        **model.resolve_passes(args.levels, args.preset).parameters(),
        "model": "adain",
        "checkpoint_sha256": checkpoint_hashes(description),
    }
