"""Video style transfer: the clip path (chunks blended along the motion) against per-frame
stylisation of the same frames, side by side in one run.

Clips are made here: moving shapes over a textured gradient, and a camera panning across
each shared sample photo (``--images``), ``--seconds`` at 24 fps, at each ``--sizes``
(480p is 854 x 480, 720p 1280 x 720), for each preset. For each clip and preset:

- ``warp``: the warping error (``models.flow.warping_error``: occlusion-masked, on the
  outputs, with the flow of the inputs), mean over consecutive pairs; on a pan the flow
  is the pan's own (exact), on the shapes DIS ("medium") with its round-trip mask;
- ``gram``: the Gram style loss of every sixth frame against the painting
  (``models.adain.metrics.gram_style_loss`` on a float32 encoder), mean;
- ``fps``: frames stylised per second (the model and, for the clip path, its flow and
  blending; decoding and encoding are the same for both and left out), the two taking
  turns chunk by chunk so that other load on the machine falls on both alike;
- ratios ours / per-frame: targets warp <= 0.5, gram within 10 %, fps >= 0.8.

``--rss``: instead, the whole job path (decode, stylise, encode, assemble) on a generated
720p pan of ``--seconds``, reporting the process's peak RSS growth over the loaded model
(run it at two durations to see it does not grow with the clip).

    python benchmarks/video.py --seconds 5 --sizes 480,720 --presets quality,realtime
    python benchmarks/video.py --seconds 2 --sizes 480 --strip docs/images/video-strip.jpg
    python benchmarks/video.py --rss --seconds 60 --presets realtime
"""

from __future__ import annotations

import argparse
import io
import os
import resource
import statistics
import time
from collections.abc import Iterator
from pathlib import Path

import cv2
import numpy as np
import torch
from PIL import Image

from models.adain import StyleTransfer
from models.adain.metrics import gram_style_loss
from models.adain.options import StyleOptions
from models.adain.video import CHUNK_FRAMES, stylize_chunk, stylize_clip
from models.flow import FlowEstimator, reliable_mask, shift_flow, warping_error
from models.temporal import BLEND_STRENGTH, StageBlend

FPS = 24
SIZES = {"480": (480, 854), "720": (720, 1280)}
STYLE = "starry_night.jpg"


def shared_dir() -> Path:
    weights = Path(
        os.environ.get("ATELIER_WEIGHTS_DIR", Path(__file__).parents[2] / "shared/weights")
    )
    return weights.parent


# ---------------------------------------------------------------------- clips
def pan_frames(
    photo: Path, frames: int, size: tuple[int, int]
) -> tuple[Iterator[np.ndarray], float]:
    """A camera panning right across ``photo`` (scaled to 1.4x the frame's width), at a
    constant sub-pixel speed: the frames ``(H, W, 3)`` uint8, one at a time, and the speed
    in px per frame."""
    height, width = size
    image = np.asarray(Image.open(photo).convert("RGB")).astype(np.float32)
    scale = max(1.4 * width / image.shape[1], height / image.shape[0])
    image = cv2.resize(image, None, fx=scale, fy=scale, interpolation=cv2.INTER_CUBIC)
    speed = (image.shape[1] - width) / frames
    top = (image.shape[0] - height) // 2

    def generate() -> Iterator[np.ndarray]:
        for t in range(frames):
            shift = np.float32([[1, 0, -speed * t], [0, 1, -top]])
            window = cv2.warpAffine(image, shift, (width, height), flags=cv2.INTER_CUBIC)
            yield np.clip(window + 0.5, 0, 255).astype(np.uint8)

    return generate(), speed


def pan_clip(photo: Path, frames: int, size: tuple[int, int]) -> tuple[torch.Tensor, float]:
    """:func:`pan_frames` as one ``(n, 3, H, W)`` uint8 tensor."""
    generated, speed = pan_frames(photo, frames, size)
    clip = torch.from_numpy(np.stack(list(generated))).permute(0, 3, 1, 2).contiguous()
    return clip, speed


def shapes_clip(frames: int, size: tuple[int, int], seed: int = 0) -> torch.Tensor:
    """A circle, a square and a triangle crossing a textured gradient at their own speeds
    (they pass in front of each other): ``(n, 3, H, W)`` uint8."""
    height, width = size
    rng = np.random.default_rng(seed)
    ramp = np.linspace(40, 200, width, dtype=np.float32)[None, :, None]
    base = np.broadcast_to(ramp, (height, width, 3)) * np.array([0.6, 0.8, 1.0], np.float32)
    texture = cv2.GaussianBlur(rng.normal(0, 30, (height, width, 3)).astype(np.float32), (0, 0), 2)
    background = np.clip(base + texture, 0, 255)
    side = height // 4
    shapes = [
        ("circle", (0.1, 0.3), (2.0, 0.4), (220, 60, 50)),
        ("square", (0.7, 0.6), (-1.5, -0.3), (50, 170, 80)),
        ("triangle", (0.3, 0.7), (1.0, -0.6), (240, 200, 40)),
    ]
    out = []
    for t in range(frames):
        frame = background.copy()
        for kind, (x0, y0), (vx, vy), colour in shapes:
            x = int(x0 * width + vx * t * width / 400)
            y = int(y0 * height + vy * t * height / 400)
            if kind == "circle":
                cv2.circle(frame, (x, y), side // 2, colour, -1, cv2.LINE_AA)
            elif kind == "square":
                cv2.rectangle(frame, (x, y), (x + side, y + side), colour, -1, cv2.LINE_AA)
            else:
                points = np.array([[x, y], [x + side, y], [x + side // 2, y - side]], np.int32)
                cv2.fillPoly(frame, [points], colour, cv2.LINE_AA)
        out.append(np.clip(frame + 0.5, 0, 255).astype(np.uint8))
    return torch.from_numpy(np.stack(out)).permute(0, 3, 1, 2).contiguous()


# -------------------------------------------------------------------- methods
def per_frame(model, chunks, style, preset) -> Iterator[torch.Tensor]:
    """Each frame stylised on its own (the same pyramid, nothing carried), a chunk at a
    time."""
    for frames in chunks:
        outputs = []
        for frame in frames:
            blend = StageBlend(0.0)
            blend.begin([None])
            outputs.append(
                stylize_chunk(model, frame[None], [style], StyleOptions(preset=preset), blend)
            )
        yield torch.cat(outputs)


def side_by_side(model, clip, style, preset, strength) -> dict[str, tuple[torch.Tensor, float]]:
    """Per-frame stylisation and the clip path (chunks of ``CHUNK_FRAMES`` through
    :func:`stylize_clip`) on the same frames, chunk by chunk in turn, so that whatever
    else loads the machine loads both alike: each one's frames and seconds."""

    def chunks():
        return (clip[i : i + CHUNK_FRAMES] for i in range(0, clip.shape[0], CHUNK_FRAMES))

    runs = {
        "per-frame": per_frame(model, chunks(), style, preset),
        "ours": (
            frames
            for frames, _ in stylize_clip(
                model, chunks(), [style], StyleOptions(preset=preset), strength=strength
            )
        ),
    }
    outputs: dict[str, list[torch.Tensor]] = {name: [] for name in runs}
    seconds = dict.fromkeys(runs, 0.0)
    for _ in range(0, clip.shape[0], CHUNK_FRAMES):
        for name, run in runs.items():
            start = time.perf_counter()
            outputs[name].append(next(run))
            seconds[name] += time.perf_counter() - start
    return {name: (torch.cat(outputs[name]), seconds[name]) for name in runs}


# -------------------------------------------------------------------- metrics
def motions_of(clip: torch.Tensor, pan_speed: float | None) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per consecutive pair: the backward flow of the inputs and its reliable mask."""
    if pan_speed is not None:
        exact = shift_flow(tuple(clip.shape[-2:]), pan_speed)
        return [exact] * (clip.shape[0] - 1)
    estimator = FlowEstimator("medium")
    pairs = []
    for t in range(1, clip.shape[0]):
        backward, forward = estimator.flows(clip[t - 1], clip[t])
        pairs.append((backward, reliable_mask(backward, forward)))
    return pairs


def warp_error(outputs: torch.Tensor, motions) -> float:
    return statistics.mean(
        warping_error(outputs[t], outputs[t + 1], backward, mask)
        for t, (backward, mask) in enumerate(motions)
    )


def gram(encoder, outputs: torch.Tensor, style: torch.Tensor) -> float:
    picked = outputs[::6].float().div(255.0)
    return float(gram_style_loss(encoder, picked, style).mean())


# ----------------------------------------------------------------------- main
def compare(args) -> None:
    shared = shared_dir()
    weights = [shared / "weights"]
    model = StyleTransfer.from_pretrained(weights, fast=True)
    encoder = StyleTransfer.from_pretrained(weights, fast=False).encoder  # float32, for the metric
    style_image = Image.open(shared / "images" / "style" / STYLE).convert("RGB")
    frames = round(args.seconds * FPS)
    print(
        f"{frames} frames at {FPS} fps, style {STYLE}, chunks of {CHUNK_FRAMES}, "
        f"blend strength {args.strength}",
        flush=True,
    )
    header = f"{'clip':<22}{'preset':<10}{'warp ours/per':>20}{'ratio':>7}"
    header += f"{'gram ours/per':>18}{'ratio':>7}{'fps ours/per':>16}{'ratio':>7}"
    print(header)
    rows, strip = [], None
    for size_name in args.sizes.split(","):
        size = SIZES[size_name]
        longer = max(size)
        scale = longer / max(style_image.size)
        style_pixels = style_image.resize(
            (round(style_image.width * scale), round(style_image.height * scale)), Image.LANCZOS
        )
        style = torch.from_numpy(np.asarray(style_pixels).copy()).permute(2, 0, 1)[None] / 255.0
        clips = [("shapes", shapes_clip(frames, size), None)]
        for name in args.images.split(","):
            clip, speed = pan_clip(shared / "images" / "content" / name, frames, size)
            clips.append((f"pan {Path(name).stem}", clip, speed))
        for clip_name, clip, speed in clips:
            motions = motions_of(clip, speed)
            for preset in args.presets.split(","):
                done = side_by_side(model, clip, style, preset, args.strength)
                (alone, alone_s), (ours, ours_s) = done["per-frame"], done["ours"]
                row = {
                    "warp": (warp_error(ours, motions), warp_error(alone, motions)),
                    "gram": (gram(encoder, ours, style), gram(encoder, alone, style)),
                    "fps": (frames / ours_s, frames / alone_s),
                }
                rows.append(row)
                line = f"{clip_name + ' ' + size_name + 'p':<22}{preset:<10}"
                for key, spec in (("warp", ".5f"), ("gram", ".3f"), ("fps", ".2f")):
                    mine, theirs = row[key]
                    line += (
                        f"{format(mine, spec):>10}/{format(theirs, spec):<9}{mine / theirs:>6.2f}"
                    )
                print(line, flush=True)
                if strip is None and args.strip and speed is not None:
                    strip = (clip, alone, ours)
    for key in ("warp", "gram", "fps"):
        ratios = [row[key][0] / row[key][1] for row in rows]
        print(
            f"{key} ratio ours/per-frame: median {statistics.median(ratios):.3f}, "
            f"min {min(ratios):.3f}, max {max(ratios):.3f}"
        )
    if strip is not None:
        save_strip(Path(args.strip), *strip)


def save_strip(path: Path, clip, alone, ours, count: int = 5, every: int = 2) -> None:
    """Rows: the input, per-frame stylisation, ours; ``count`` frames ``every`` apart."""
    picks = range(0, count * every, every)
    rows = [torch.cat([frames[t] for t in picks], dim=2) for frames in (clip, alone, ours)]
    image = torch.cat(rows, dim=1).permute(1, 2, 0).numpy()
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(image).save(path, quality=88)
    print(f"strip: {path} (rows: input, per-frame, ours; frames {list(picks)})")


def peak_rss(args) -> None:
    """The job path on a generated 720p pan, chunk by chunk from an encoded clip."""
    from models.video import assemble, encode_segment, frame_chunks, probe

    shared = shared_dir()
    frames = round(args.seconds * FPS)
    model = StyleTransfer.from_pretrained([shared / "weights"], fast=True)
    data = encode_clip(shared / "images" / "content" / "chelsea.png", frames, SIZES["720"])
    info = probe(data)
    style = torch.rand(1, 3, 512, 512, generator=torch.Generator().manual_seed(0))
    model.stylize(torch.rand(1, 3, 64, 64), [style])  # warm up before the baseline
    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    start = time.perf_counter()
    segments = []
    chunks = frame_chunks(data, CHUNK_FRAMES, size=(info.height, info.width))
    for stylised, _ in stylize_clip(
        model, chunks, [style], StyleOptions(preset=args.presets.split(",")[0])
    ):
        segments.append(encode_segment(stylised, info))
    out = io.BytesIO()
    assemble(segments, data, info, {}, out)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"{frames} frames of 720p in {time.perf_counter() - start:.0f} s; result "
        f"{len(out.getvalue()) / 1e6:.1f} MB; peak RSS {peak:.0f} MB, growth over the loaded "
        f"model {peak - baseline:.0f} MB"
    )


def encode_clip(photo: Path, frames: int, size: tuple[int, int]) -> bytes:
    """An H.264 MP4 of a pan across ``photo``, encoded frame by frame (never all held)."""
    import av

    height, width = size
    buffer = io.BytesIO()
    with av.open(buffer, "w", format="mp4") as container:
        stream = container.add_stream("libx264", rate=FPS)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        generated, _ = pan_frames(photo, frames, size)
        for image in generated:
            for packet in stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return buffer.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--sizes", default="480,720")
    parser.add_argument("--presets", default="quality,realtime")
    parser.add_argument("--images", default="astronaut.png,chelsea.png,coffee.png,rocket.jpg")
    parser.add_argument(
        "--strength", type=float, default=BLEND_STRENGTH, help="the blend at the coarse stages"
    )
    parser.add_argument("--strip", help="save a strip of consecutive frames (a pan) here")
    parser.add_argument("--rss", action="store_true", help="peak RSS of the job path instead")
    args = parser.parse_args()
    torch.set_grad_enabled(False)
    if args.rss:
        peak_rss(args)
    else:
        compare(args)


if __name__ == "__main__":
    main()
