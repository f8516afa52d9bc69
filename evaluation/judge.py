"""The judge: a classifier of the things vocabulary, trained here on real renders.

It scores generated images (top-1 / top-5 against the thing a prompt named) and gives
the feature space of a Fréchet distance between generated and real renders. Its own
held-out accuracy, on single-object renders it never saw, is the ceiling any generator
can be measured against.

**Network** (:class:`Judge`, ~1.5 M parameters for the 1,304 classes at ``w = 32``):
input ``(B, 3, 64, 64)`` RGB in ``[0, 1]``, standardised as ``(x - 0.5) / 0.25``;

    stem    conv3x3/2   3 -> w                           32 x 32
    stage1  conv3x3/2   w -> 2w,  conv3x3 2w -> 2w       16 x 16
    stage2  conv3x3/2  2w -> 4w,  conv3x3 4w -> 4w        8 x 8
    stage3  conv3x3/2  4w -> 8w,  conv3x3 8w -> 8w        4 x 4
    pool    global mean -> 8w features (:meth:`Judge.features`)
    head    dropout 0.1, linear 8w -> classes

Every conv is followed by a ``norms`` layer (``norms.build(norm, C)``, GroupNorm with 8
groups by default) and SiLU. It is small on purpose: about 45 M multiply-adds an image,
so that it trains on these CPUs in minutes.

**Training data** (:class:`JudgeRenders`): item ``i`` of seed ``s`` is a class drawn
uniformly and one render of it, from a generator seeded with ``(s, i)``: an emoji thing
centred at 20-56 px (70 %) or in a random grid cell at 11-20 px (30 %), on a random
background of :data:`models.things.scenes.BACKGROUNDS`, hue-shifted to a random thing
colour a quarter of the time when it has colour variants; a shape is a one-object scene
of the shapes world (black canvas, palette colours, upscaled to 64 px). Training uses
seed 0; the held-out accuracy uses seed 1 (other sizes, places, backgrounds, colours).

**Fréchet distance** between feature sets ``a`` and ``b`` (rows are samples):
``||mu_a - mu_b||^2 + Tr(S_a + S_b - 2 (S_a S_b)^{1/2})``, the matrix square root by
``scipy.linalg.sqrtm`` (its real part; ``eps * I`` is added to both covariances when the
product is singular).

Measured (Dec 2026): 12.5 minutes on this shared 2-core CPU (load average ~10, one
thread, one data worker) reach 648 steps of 64 (41,472 samples, ~32 per class) and a
held-out top-1 of 0.009, top-5 of 0.030 (chance: 0.0008 / 0.004): the recipe runs, but
a useful ceiling needs the GPU machine, where the same command trains with
``--device cuda --workers 12 --batch 256`` (the renders, ~1,500 a second per core, then
keep up). Training resumes from ``<out>.train.pt`` (never committed).

Usage::

    python -m evaluation.judge train --out weights/judge-things64.safetensors --minutes 12
    python -m evaluation.judge train --device cuda --workers 12 --batch 256 --minutes 5
    python -m evaluation.judge accuracy --weights weights/judge-things64.safetensors
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import nn
from torch.utils.data import DataLoader, Dataset

import norms
from models.shapes import render as render_shapes
from models.shapes.captions import ObjectSpec, ParsedCaption
from models.shapes.scenes import layout as shapes_layout
from models.shapes.vocab import COLOURS, POSITIONS, SIZES
from models.things.render import THING_COLOURS, colourable
from models.things.scenes import (
    BACKGROUNDS,
    CANVAS,
    CELL,
    CELL_SIDE,
    PlacedThing,
    ThingScene,
    draw_float,
    subset_pool,
)
from models.things.vocab import thing, thing_keys

_STREAM = 0x1D6E


@dataclass(frozen=True)
class JudgeConfig:
    """The judge's shape: class keys (in logit order), base width and norm name."""

    classes: tuple[str, ...]
    width: int = 32
    norm: str = "group"
    groups: int = 8

    def __post_init__(self) -> None:
        if len(self.classes) < 2 or len(set(self.classes)) != len(self.classes):
            raise ValueError("the judge needs at least two distinct classes")
        if self.width < 8 or self.width % self.groups:
            raise ValueError(f"width must be >= 8 and divisible by {self.groups}, got {self.width}")


def _conv(cin: int, cout: int, stride: int, config: JudgeConfig) -> nn.Sequential:
    norm_kwargs = {"num_groups": config.groups} if config.norm == "group" else {}
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False),
        norms.build(config.norm, cout, **norm_kwargs),
        nn.SiLU(),
    )


class Judge(nn.Module):
    """A small CNN classifier of the things vocabulary (see the module docstring)."""

    def __init__(self, config: JudgeConfig) -> None:
        super().__init__()
        self.config = config
        w = config.width
        self.body = nn.Sequential(
            _conv(3, w, 2, config),
            _conv(w, 2 * w, 2, config),
            _conv(2 * w, 2 * w, 1, config),
            _conv(2 * w, 4 * w, 2, config),
            _conv(4 * w, 4 * w, 1, config),
            _conv(4 * w, 8 * w, 2, config),
            _conv(8 * w, 8 * w, 1, config),
        )
        self.dropout = nn.Dropout(0.1)
        self.head = nn.Linear(8 * w, len(config.classes))

    @property
    def feature_dim(self) -> int:
        return 8 * self.config.width

    def features(self, images: torch.Tensor) -> torch.Tensor:
        """Penultimate features: ``(B, 3, 64, 64)`` in ``[0, 1]`` -> ``(B, 8w)``."""
        if images.dim() != 4 or images.shape[1] != 3:
            raise ValueError(f"expected images (B, 3, H, W), got {tuple(images.shape)}")
        return self.body((images - 0.5) / 0.25).mean(dim=(2, 3))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Logits ``(B, classes)``."""
        return self.head(self.dropout(self.features(images)))


def render_example(key: str, rng: np.random.Generator) -> np.ndarray:
    """One single-object render of thing ``key``: float32 ``(64, 64, 3)`` in ``[0, 1]``."""
    item = thing(key)
    if item.is_shape:
        colour = COLOURS[int(rng.integers(len(COLOURS)))]
        position = POSITIONS[int(rng.integers(len(POSITIONS)))] if rng.random() < 0.5 else None
        size = SIZES[int(rng.integers(len(SIZES)))]
        spec = ObjectSpec(colour, key, size=size, position=position)
        small = render_shapes(shapes_layout(ParsedCaption((spec,)), rng))
        factor = CANVAS // small.shape[0]
        big = np.repeat(np.repeat(small, factor, axis=0), factor, axis=1)
        return big.astype(np.float32) / np.float32(255.0)
    colour = None
    if rng.random() < 0.25 and colourable(item):
        colour = THING_COLOURS[int(rng.integers(len(THING_COLOURS)))]
    if rng.random() < 0.7:
        side = 20 + 2 * int(rng.integers(19))
        slack = min(4.0, (CANVAS - side) / 2)
        dx, dy = rng.uniform(-slack, slack, size=2).tolist()
        placed = PlacedThing(key, colour, side, (CANVAS / 2 + dx, CANVAS / 2 + dy), None)
    else:
        size = SIZES[int(rng.integers(len(SIZES)))]
        low, high = CELL_SIDE[size]
        side = int(rng.integers(low, high + 1))
        cell = int(rng.integers(9))
        row, col = divmod(cell, 3)
        slack = max(0.0, (CELL - side) / 2 - 0.5)
        dx, dy = rng.uniform(-slack, slack, size=2).tolist()
        centre = ((col + 0.5) * CELL + dx, (row + 0.5) * CELL + dy)
        placed = PlacedThing(key, colour, side, centre, cell)
    names = tuple(BACKGROUNDS)
    background = names[int(rng.integers(len(names)))]
    return draw_float(ThingScene((placed,), "", background, "things", None))


class JudgeRenders(Dataset[tuple[torch.Tensor, int]]):
    """Single-object renders with uniform labels, deterministic per ``(seed, index)``."""

    def __init__(self, classes: tuple[str, ...], *, seed: int = 0, length: int = 10**9) -> None:
        self.classes = classes
        self.seed = seed
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        rng = np.random.default_rng([self.seed, _STREAM, index])
        label = int(rng.integers(len(self.classes)))
        image = render_example(self.classes[label], rng)
        return torch.from_numpy(image).permute(2, 0, 1).contiguous(), label


def frechet_distance(
    feats_a: np.ndarray | torch.Tensor, feats_b: np.ndarray | torch.Tensor, eps: float = 1e-6
) -> float:
    """Fréchet distance between Gaussians fitted to two feature sets ``(N, D)``."""
    from scipy import linalg

    a = np.asarray(feats_a, dtype=np.float64)
    b = np.asarray(feats_b, dtype=np.float64)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"expected two (N, D) feature sets, got {a.shape} and {b.shape}")
    if len(a) < 2 or len(b) < 2:
        raise ValueError("each feature set needs at least two rows")
    mu_a, mu_b = a.mean(axis=0), b.mean(axis=0)
    cov_a, cov_b = np.cov(a, rowvar=False), np.cov(b, rowvar=False)
    root = linalg.sqrtm(cov_a @ cov_b)
    if not np.isfinite(root).all():
        offset = eps * np.eye(len(cov_a))
        root = linalg.sqrtm((cov_a + offset) @ (cov_b + offset))
    root = np.real(root)
    diff = mu_a - mu_b
    return float(diff @ diff + np.trace(cov_a) + np.trace(cov_b) - 2.0 * np.trace(root))


def save_judge(model: Judge, path: Path, info: dict[str, object]) -> None:
    """Write the weights (float32) and ``config`` + ``info`` as safetensors metadata."""
    path.parent.mkdir(parents=True, exist_ok=True)
    metadata = {"config": json.dumps(asdict(model.config))}
    metadata.update({k: json.dumps(v) for k, v in info.items()})
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    tmp = path.with_suffix(".tmp")
    save_file(state, str(tmp), metadata=metadata)
    os.replace(tmp, path)


def read_metadata(path: Path) -> dict[str, object]:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as handle:
        raw = handle.metadata() or {}
    return {k: json.loads(v) for k, v in raw.items()}


def load_judge(path: Path) -> Judge:
    """The judge saved at ``path``, in eval mode."""
    meta = read_metadata(path)
    config_dict = dict(meta["config"])  # type: ignore[call-overload]
    config_dict["classes"] = tuple(config_dict["classes"])
    model = Judge(JudgeConfig(**config_dict))
    model.load_state_dict(load_file(str(path)))
    return model.eval()


@torch.inference_mode()
def accuracy(
    model: Judge, *, seed: int = 1, per_class: int = 2, batch: int = 256
) -> dict[str, float]:
    """Top-1 / top-5 on ``per_class`` fresh renders of every class (seed ``seed``)."""
    model.eval()
    classes = model.config.classes
    correct1 = correct5 = total = 0
    images, labels = [], []
    for label, key in enumerate(classes):
        for j in range(per_class):
            rng = np.random.default_rng([seed, _STREAM, label, j])
            images.append(torch.from_numpy(render_example(key, rng)).permute(2, 0, 1))
            labels.append(label)
    device = next(model.parameters()).device
    for start in range(0, len(images), batch):
        x = torch.stack(images[start : start + batch]).to(device)
        y = torch.tensor(labels[start : start + batch], device=device)
        top = model(x).topk(min(5, len(classes)), dim=1).indices
        correct1 += int((top[:, 0] == y).sum())
        correct5 += int((top == y[:, None]).any(dim=1).sum())
        total += len(y)
    return {"top1": correct1 / total, "top5": correct5 / total, "renders": float(total)}


def cosine_lr(peak: float, step: int, progress: float, warmup: int = 100) -> float:
    """Linear warm-up over ``warmup`` steps, then a cosine from ``peak`` to 5 % of it as
    ``progress`` goes from 0 to 1."""
    warm = min(1.0, (step + 1) / warmup)
    progress = min(1.0, max(0.0, progress))
    return peak * warm * (0.05 + 0.95 * 0.5 * (1.0 + math.cos(math.pi * progress)))


def train_steps(
    model: Judge,
    optimizer: torch.optim.Optimizer,
    batches: Iterator[tuple[torch.Tensor, torch.Tensor]],
    *,
    steps: int,
    lr_at: Callable[[int], float],
    start_step: int = 0,
    deadline: float | None = None,
) -> tuple[int, list[float]]:
    """Run up to ``steps`` optimisation steps (stopping early at ``deadline``, a
    ``time.monotonic`` value), the learning rate ``lr_at(step)``, label smoothing 0.1.

    Returns the step reached and the losses.
    """
    model.train()
    device = next(model.parameters()).device
    step, losses = start_step, []
    for cpu_images, cpu_labels in batches:
        images, labels = cpu_images.to(device), cpu_labels.to(device)
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step)
        loss = F.cross_entropy(model(images), labels, label_smoothing=0.1)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        step += 1
        if step - start_step >= steps or (deadline is not None and time.monotonic() >= deadline):
            break
    return step, losses


def _hardware(device: str) -> str:
    if device.startswith("cuda"):
        return f"{torch.cuda.get_device_name(device)} ({platform.machine()} host)"
    return f"{platform.machine()} CPU, {torch.get_num_threads()} threads (shared machine)"


def _train(args: argparse.Namespace) -> None:
    out = Path(args.out)
    state_path = out.with_suffix(".train.pt")
    classes = tuple(item.key for item in subset_pool(args.things)) if args.things else thing_keys()
    model = Judge(JudgeConfig(classes, width=args.width)).to(args.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.05)
    step, samples, minutes = 0, 0, 0.0
    if state_path.exists() and not args.fresh:
        state = torch.load(state_path, weights_only=False, map_location=args.device)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step, samples, minutes = state["step"], state["samples"], state["minutes"]
        print(f"resumed at step {step} ({samples} samples, {minutes:.1f} min)")
    loader = DataLoader(
        JudgeRenders(classes, seed=0),
        batch_size=args.batch,
        sampler=range(samples, 10**12),
        num_workers=args.workers,
    )
    batches = iter(loader)
    torch.set_num_threads(args.threads)
    start = time.monotonic()
    deadline = start + 60.0 * args.minutes
    done = step

    def lr_at(k: int) -> float:
        # each run's cosine spans its own minutes (a resumed run restarts it)
        return cosine_lr(args.lr, k, (time.monotonic() - start) / (deadline - start))

    while time.monotonic() < deadline:
        done, losses = train_steps(
            model,
            optimizer,
            batches,
            steps=args.log_every,
            lr_at=lr_at,
            start_step=done,
            deadline=deadline,
        )
        elapsed = (time.monotonic() - start) / 60.0
        print(f"step {done} loss {np.mean(losses):.3f} ({elapsed:.1f} min)", flush=True)
    samples += (done - step) * args.batch
    minutes += (time.monotonic() - start) / 60.0
    torch.save(
        {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "step": done,
            "samples": samples,
            "minutes": minutes,
        },
        state_path,
    )
    scores = accuracy(model, per_class=args.eval_per_class)
    print(json.dumps({"step": done, "samples": samples, "minutes": round(minutes, 2), **scores}))
    info = {
        "steps": done,
        "samples": samples,
        "minutes": round(minutes, 2),
        "hardware": _hardware(args.device),
        "heldout_top1": round(scores["top1"], 4),
        "heldout_top5": round(scores["top5"], 4),
        "heldout_renders": int(scores["renders"]),
        "params": sum(p.numel() for p in model.parameters()),
    }
    save_judge(model.cpu(), out, info)
    print(f"wrote {out}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m evaluation.judge", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train", help="train (or resume) the judge for some minutes")
    train.add_argument("--out", default="weights/judge-things64.safetensors")
    train.add_argument("--minutes", type=float, default=10.0)
    train.add_argument("--batch", type=int, default=64)
    train.add_argument("--lr", type=float, default=2e-3)
    train.add_argument("--width", type=int, default=32)
    train.add_argument("--workers", type=int, default=1)
    train.add_argument("--threads", type=int, default=1)
    train.add_argument("--device", default="cpu", help="cpu, or cuda on a GPU machine")
    train.add_argument("--log-every", type=int, default=50)
    train.add_argument("--eval-per-class", type=int, default=2)
    train.add_argument("--fresh", action="store_true", help="ignore a saved training state")
    train.add_argument(
        "--things",
        type=int,
        help="judge only the N things a CPU-sized DiT run trained on (train-dit --things N)",
    )
    score = sub.add_parser("accuracy", help="held-out top-1/top-5 of saved weights")
    score.add_argument("--weights", default="weights/judge-things64.safetensors")
    score.add_argument("--per-class", type=int, default=2)
    args = parser.parse_args(argv)
    if args.command == "train":
        _train(args)
    else:
        print(json.dumps(accuracy(load_judge(Path(args.weights)), per_class=args.per_class)))


if __name__ == "__main__":
    main()
