"""Speed of the text-to-image DiT on the CPU, and its forward pass against diffusers' DiT.

1. Images per second of each model of ``--models`` (default: the 32 px shapes model and
   the 64 px things model, side by side, interleaved in one run) for batch 1, 8 and 32 at
   each pipeline's default steps, sampler and guidance (classifier-free guidance
   evaluates the model twice per step), text encoding included. A model's checkpoint in
   weights/ is used when present, else a randomly initialised model of its preset (same
   cost). Two prompts: one object (``ONE``, drawn in one piece) and two objects
   (``TWO``, as served: layout planning, one region per object, each guided, about twice
   the model work). Targets for the 64 px model: one image in <= 2 s at batch 1
   (>= 0.5 images/s), >= 2 images/s at batch 8.
2. Forward time of our ``DiT`` against ``diffusers.DiTTransformer2DModel`` (a ``bench``
   extra) built at the same depth, width, heads, patch size and MLP ratio, measured
   interleaved in one run (median of ``--repeats``). Ours is built without text
   cross-attention for the like-for-like figure (diffusers' DiT has none); the shipped
   configuration, with cross-attention, is reported beside it. Target: ratio <= 1.

    .venv/bin/python benchmarks/dit_bench.py
    .venv/bin/python benchmarks/dit_bench.py --models things64 --batches 1 8 --skip-forward
    .venv/bin/python benchmarks/dit_bench.py --threads 1 --repeats 9 --json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from pathlib import Path

import torch

from models.dit.config import get_preset
from models.dit.model import DiT
from models.dit.pipeline import TextToImage
from models.text_encoder import HashedWordEncoder

ROOT = Path(__file__).resolve().parent.parent

#: The forward comparison's caption, and the two-object prompt of the speed table.
PROMPT = "a small red circle to the left of a blue square"
TWO = PROMPT
ONE = "a red circle"


def load_pipeline(preset: str) -> tuple[TextToImage, str]:
    """The preset's checkpoint from weights/ (``dit-PRESET.safetensors``, what
    ``atelier train-dit`` exports), else a randomly initialised model of the preset."""
    path = ROOT / "weights" / f"dit-{preset}.safetensors"
    if path.is_file():
        return TextToImage.from_checkpoint(path), str(path.relative_to(ROOT))
    model = DiT(get_preset(preset))
    return TextToImage(model, HashedWordEncoder(model.config.text_dim)), f"random {preset}"


def images_per_second(
    pipes: dict[str, TextToImage], batch: int, repeats: int
) -> dict[str, dict[str, float]]:
    """Per model, images per second for one object and for two (planned), measured
    interleaved: every repeat runs each model and prompt once, in turn."""
    prompts = {"one": ONE, "two planned": TWO}
    for pipe in pipes.values():  # warm-up
        for prompt in prompts.values():
            pipe.generate([prompt], seeds=[0], steps=2)
    times = {(name, kind): [] for name in pipes for kind in prompts}
    for r in range(repeats):
        seeds = list(range(r * batch, (r + 1) * batch))
        for name, pipe in pipes.items():
            for kind, prompt in prompts.items():
                start = time.perf_counter()
                pipe.generate([prompt] * batch, seeds=seeds)
                times[name, kind].append(time.perf_counter() - start)
    return {
        name: {kind: batch / statistics.median(times[name, kind]) for kind in prompts}
        for name in pipes
    }


def build_diffusers(config):
    from diffusers import DiTTransformer2DModel

    if config.mlp_ratio != 4.0:
        raise ValueError("diffusers' DiT has a fixed MLP ratio of 4")
    return DiTTransformer2DModel(
        num_attention_heads=config.num_heads,
        attention_head_dim=config.width // config.num_heads,
        in_channels=config.in_channels,
        out_channels=config.in_channels,
        num_layers=config.depth,
        sample_size=config.image_size,
        patch_size=config.patch_size,
        num_embeds_ada_norm=1000,
    ).eval()


@torch.inference_mode()
def forward_times(config, batch: int, repeats: int) -> dict[str, float]:
    """Median seconds per forward of each network, measured interleaved."""
    encoder = HashedWordEncoder(config.text_dim)
    cond = encoder.encode([PROMPT] * batch)
    x = torch.randn(batch, config.in_channels, config.image_size, config.image_size)
    t = torch.randint(0, 1000, (batch,))
    labels = torch.randint(0, 1000, (batch,))
    plain = dataclasses.replace(config, cross_attention=False, text_positions=0)
    ours_plain = DiT(plain).eval()
    ours_cross = DiT(dataclasses.replace(config, cross_attention=True)).eval()
    theirs = build_diffusers(config)
    calls = {
        "ours": lambda: ours_plain(x, t, cond),
        "ours_cross_attention": lambda: ours_cross(x, t, cond),
        "diffusers": lambda: theirs(x, timestep=t, class_labels=labels, return_dict=False),
    }
    times: dict[str, list[float]] = {name: [] for name in calls}
    for call in calls.values():  # warm-up
        call()
    for _ in range(repeats):
        for name, call in calls.items():
            start = time.perf_counter()
            call()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--models", nargs="+", default=["shapes32", "things64"], help="presets to time"
    )
    parser.add_argument("--preset", default="shapes32", help="the forward comparison's")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's)")
    parser.add_argument("--skip-generate", action="store_true", help="forward comparison only")
    parser.add_argument("--skip-forward", action="store_true", help="the speed table only")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    config = get_preset(args.preset)
    result: dict = {"threads": torch.get_num_threads(), "preset": args.preset}

    if not args.skip_generate:
        loaded = {preset: load_pipeline(preset) for preset in args.models}
        pipes = {preset: pipe for preset, (pipe, _) in loaded.items()}
        result["generate"] = {
            preset: {
                "model": source,
                "image_size": pipe.image_size,
                "steps": pipe.defaults.steps,
                "guidance_scale": pipe.defaults.guidance_scale,
                "sampler": pipe.defaults.sampler,
            }
            for preset, (pipe, source) in loaded.items()
        }
        result["images_per_s"] = {
            b: images_per_second(pipes, b, max(1, args.repeats // 2)) for b in args.batches
        }
    result["forward"] = {}
    for batch in [] if args.skip_forward else args.batches:
        times = forward_times(config, batch, args.repeats)
        times["ratio_ours_over_diffusers"] = times["ours"] / times["diffusers"]
        result["forward"][batch] = times

    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(
        f"threads={result['threads']} preset={args.preset} width={config.width} "
        f"depth={config.depth} heads={config.num_heads} patch={config.patch_size}"
    )
    if "generate" in result:
        for preset, g in result["generate"].items():
            print(
                f"{preset}: {g['model']}, {g['image_size']} px, {g['sampler']} {g['steps']} "
                f"steps, guidance {g['guidance_scale']:g}"
            )
        print(f"images/s (one: {ONE!r}; two: {TWO!r}, planned)")
        names = list(result["generate"])
        print("           " + "".join(f"{n + ' one':>18}{n + ' two':>18}" for n in names))
        for batch, speeds in result["images_per_s"].items():
            row = "".join(
                f"{speeds[n]['one']:18.2f}{speeds[n]['two planned']:18.2f}" for n in names
            )
            print(f"  batch {batch:>3}{row}")
        if len(names) > 1:
            first, last = names[0], names[-1]
            for batch, speeds in result["images_per_s"].items():
                ratio = speeds[last]["one"] / speeds[first]["one"]
                print(f"  batch {batch:>3}: {last} / {first} (one object) = {ratio:.2f}x")
    if not result["forward"]:
        return 0
    print("forward (ms, median):   ours  ours+xattn  diffusers  ours/diffusers")
    for batch, times in result["forward"].items():
        print(
            f"  batch {batch:>3}: {1e3 * times['ours']:9.2f} {1e3 * times['ours_cross_attention']:11.2f}"
            f" {1e3 * times['diffusers']:10.2f} {times['ratio_ours_over_diffusers']:15.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
