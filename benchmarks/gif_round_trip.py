"""An animated GIF's round trip through the clip path, frames passed through unstylised:
what the result keeps of the source (frame count, per-frame delays, loop count, comment)
and how far its pixels moved, as JSON; ``--compare BEFORE.json`` also says, GIF by GIF,
whether frames, delays and loop equal that earlier run's.

The three GIFs are made here (Pillow): ``short`` (12 frames of 64 x 48 px at 40 ms, looping
forever), ``delays`` (6 frames of 40 to 120 ms, looping 3 times) and ``long`` (320 frames
of 96 x 64 px, delays cycling through 20 to 90 ms, a still pause of 10 identical frames,
played once). Run it before and after a change to the GIF code:

    python benchmarks/gif_round_trip.py > before.json
    python benchmarks/gif_round_trip.py --compare before.json
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import time
from pathlib import Path

import numpy as np
from PIL import Image

from models.video import assemble, encode_segment, frame_chunks, probe

CHUNK = 8
COMMENT = json.dumps({"style": "round-trip"})


def moving_square(index: int, height: int, width: int) -> Image.Image:
    """A gradient with a red square 2 px further right each frame."""
    y, x = np.mgrid[0:height, 0:width]
    image = np.stack([x * 255 // width, y * 255 // height, np.full_like(x, 128)], axis=-1)
    image = image.astype(np.uint8)
    left = 2 * index % (width - 16)
    image[8:24, left : left + 16] = (230, 30, 30)
    return Image.fromarray(image)


def make_gif(
    indices: list[int], size: tuple[int, int], delays_ms: list[int], loop: int | None
) -> bytes:
    pictures = [moving_square(index, *size) for index in indices]
    buffer = io.BytesIO()
    options = {} if loop is None else {"loop": loop}
    pictures[0].save(
        buffer, "GIF", save_all=True, append_images=pictures[1:], duration=delays_ms, **options
    )
    return buffer.getvalue()


def gifs() -> dict[str, bytes]:
    long_indices = [*range(150), *[150] * 10, *range(151, 311)]  # a still pause
    return {
        "short": make_gif(list(range(12)), (48, 64), [40] * 12, 0),
        "delays": make_gif(list(range(6)), (48, 64), [40, 80, 40, 120, 40, 60], 3),
        "long": make_gif(long_indices, (64, 96), [20 + 10 * (i % 8) for i in range(320)], None),
    }


def read_back(data: bytes) -> tuple[list[int], int | None, str | None, np.ndarray]:
    """Per-frame delays (ms), loop count, comment and the frames ``(n, H, W, 3)``."""
    delays, frames = [], []
    with Image.open(io.BytesIO(data)) as image:
        loop = image.info.get("loop")
        comment = image.info.get("comment")
        for index in range(image.n_frames):
            image.seek(index)
            delays.append(int(image.info["duration"]))
            frames.append(np.asarray(image.convert("RGB")))
    text = comment.decode() if isinstance(comment, bytes) else comment
    return delays, loop, text, np.stack(frames)


def round_trip(source: bytes) -> dict[str, object]:
    started = time.perf_counter()
    info = probe(source)
    segments = [encode_segment(chunk, info) for chunk in frame_chunks(source, CHUNK)]
    out = io.BytesIO()
    assemble(segments, source, info, {"comment": COMMENT}, out)
    seconds = time.perf_counter() - started
    source_delays, source_loop, _, source_frames = read_back(source)
    delays, loop, comment, frames = read_back(out.getvalue())
    error = None
    if frames.shape == source_frames.shape:
        error = float(np.abs(frames.astype(float) - source_frames.astype(float)).mean())
    return {
        "source": {"frames": len(source_delays), "delays_ms": source_delays, "loop": source_loop},
        "probe": {"frames": info.frames, "fps": str(info.fps), "size": [info.width, info.height]},
        "result": {
            "frames": len(delays),
            "delays_ms": delays,
            "loop": loop,
            "comment_kept": comment == COMMENT,
        },
        "mean_abs_error": error,
        "bytes": len(out.getvalue()),
        "seconds": round(seconds, 3),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--compare", type=Path, help="an earlier run's JSON to compare with")
    args = parser.parse_args()
    results = {name: round_trip(data) for name, data in gifs().items()}
    print(json.dumps(results, indent=1))
    if args.compare is None:
        return 0
    before = json.loads(args.compare.read_text())
    same = True
    for name, now in results.items():
        keys = ("frames", "delays_ms", "loop")
        then = before[name]["result"]
        equal = all(now["result"][key] == then[key] for key in keys)  # type: ignore[index]
        same &= equal
        print(f"{name}: frames, delays and loop {'equal' if equal else 'DIFFER'}", file=sys.stderr)
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
