"""Training an AdaIN decoder with the paper's objective (Huang & Belongie 2017, sec. 6).

With a fixed encoder ``E`` (its deepest level ``L``), content ``c`` and style ``s``:

.. math::
    t = \\mathrm{AdaIN}(E_L(c), E_L(s)), \\qquad g = D(t),

    \\mathcal{L}_c = \\lVert E_L(g) - t \\rVert_2^2 \\ \\text{(mean)}, \\qquad
    \\mathcal{L}_s = \\sum_i \\lVert \\mu(\\phi_i(g)) - \\mu(\\phi_i(s)) \\rVert_2^2
                   + \\lVert \\sigma(\\phi_i(g)) - \\sigma(\\phi_i(s)) \\rVert_2^2,

    \\mathcal{L} = w_c \\mathcal{L}_c + w_s \\mathcal{L}_s

with ``phi_i`` the encoder levels up to ``L`` and squared norms taken as means (MSE).
Adam with the inverse-time decay ``lr_t = lr / (1 + decay * t)`` of the reference port.
Only the decoder learns. Checkpoints: the decoder as safetensors (published key layout)
plus ``train_state.pt`` (optimizer and step, loaded back with ``weights_only=True``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import cast

import torch
import torch.nn.functional as F  # noqa: N812
from torch import Tensor
from tqdm import tqdm

from models.adain.metrics import stats_distance
from models.adain.stats import FeatureStats
from models.checkpoints import load_state_dict, save_state_dict, save_training_state
from models.decoder import Decoder
from models.images import load_image
from models.vgg import VGGEncoder, levels_up_to
from norms.functional import adain

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp")
STATE_FILE = "train_state.pt"


@dataclass
class TrainConfig:
    """Everything a run needs besides the encoder.

    Attributes:
        content_dir, style_dir: folders of images (searched recursively).
        out_dir: where checkpoints go.
        level: the encoder level the decoder inverts (AdaIN is applied there).
        steps: total optimisation steps (resume continues up to this).
        batch_size: content/style pairs per step.
        size: side of the square random crops (images are first scaled so the short
            side is ``size``).
        lr, lr_decay: Adam learning rate and its inverse-time decay.
        content_weight, style_weight: ``w_c``, ``w_s``.
        checkpoint_every: steps between checkpoints (and one at the end).
        init_decoder: start from this decoder checkpoint instead of random weights.
        resume: continue from ``out_dir``'s last checkpoint.
        seed: seeds the weights (from scratch) and the crops.
        device: torch device.
    """

    content_dir: Path
    style_dir: Path
    out_dir: Path
    level: str = "relu3_1"
    steps: int = 1000
    batch_size: int = 8
    size: int = 256
    lr: float = 1e-4
    lr_decay: float = 5e-5
    content_weight: float = 1.0
    style_weight: float = 10.0
    checkpoint_every: int = 500
    init_decoder: Path | None = None
    resume: bool = False
    seed: int = 0
    device: str = "cpu"

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "size", "checkpoint_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.lr <= 0 or self.lr_decay < 0:
            raise ValueError(f"need lr > 0 and lr_decay >= 0, got {self.lr}, {self.lr_decay}")
        if self.content_weight < 0 or self.style_weight < 0:
            raise ValueError("loss weights must be >= 0")

    @property
    def decoder_path(self) -> Path:
        return Path(self.out_dir) / f"decoder_{self.level}.safetensors"


def image_files(folder: Path) -> list[Path]:
    """Image files under ``folder`` (sorted); ``ValueError`` when there are none."""
    files = sorted(p for p in Path(folder).rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        raise ValueError(f"no images ({', '.join(IMAGE_SUFFIXES)}) under {folder}")
    return files


def random_crops(
    files: list[Path], size: int, batch_size: int, generator: torch.Generator
) -> Iterator[Tensor]:
    """Endless batches ``(batch_size, 3, size, size)`` of random crops of random files."""
    cache: dict[Path, Tensor] = {}
    while True:
        crops = []
        for index in torch.randint(len(files), (batch_size,), generator=generator).tolist():
            path = files[index]
            if path not in cache:
                cache[path] = _short_side(load_image(path), size)
            image = cache[path]
            top = int(torch.randint(image.shape[-2] - size + 1, (1,), generator=generator))
            left = int(torch.randint(image.shape[-1] - size + 1, (1,), generator=generator))
            crop = image[..., top : top + size, left : left + size]
            if bool(torch.rand((), generator=generator) < 0.5):
                crop = crop.flip(-1)
            crops.append(crop)
        yield torch.cat(crops)


def _short_side(image: Tensor, size: int) -> Tensor:
    height, width = image.shape[-2:]
    scale = size / min(height, width)
    shape = (max(size, round(height * scale)), max(size, round(width * scale)))
    return F.interpolate(image, size=shape, mode="bilinear", antialias=True).clamp(0, 1)


def adain_losses(
    encoder: VGGEncoder, decoder: Decoder, content: Tensor, style: Tensor
) -> tuple[Tensor, Tensor]:
    """The paper's content and style losses for one batch: ``(L_c, L_s)`` scalars."""
    level = decoder.level
    levels = levels_up_to(level)
    with torch.no_grad():
        style_features = encoder(style, levels)
        target = adain(encoder.encode(content, level), style_features[level])
    output_features = encoder(decoder(target), levels)
    content_loss = F.mse_loss(output_features[level], target)
    style_loss = sum(
        stats_distance(
            FeatureStats.of(output_features[name]), FeatureStats.of(style_features[name])
        ).mean()
        for name in levels
    )
    # a sum of tensors (typed ``Tensor | Literal[0]``: the start value of ``sum``)
    return content_loss, cast(Tensor, style_loss)


def train(config: TrainConfig, encoder: VGGEncoder, *, progress: bool = True) -> list[float]:
    """Run (or resume) training; returns the total loss of every step run.

    Raises:
        ValueError: bad config, no images, or an encoder shallower than ``config.level``.
    """
    torch.manual_seed(config.seed)
    device = torch.device(config.device)
    encoder = encoder.to(device).eval().requires_grad_(False)
    if config.level not in encoder.levels:
        raise ValueError(f"encoder depth {encoder.depth} is shallower than {config.level}")
    decoder = Decoder(config.level)
    if config.init_decoder is not None:
        decoder.load_published(load_state_dict(config.init_decoder))
    decoder = decoder.to(device).train()
    optimizer = torch.optim.Adam(decoder.parameters(), lr=config.lr)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: 1.0 / (1.0 + config.lr_decay * step)
    )
    start = 0
    out_dir = Path(config.out_dir)
    if config.resume:
        start = _load_checkpoint(config, decoder, optimizer, schedule)
    generator = torch.Generator().manual_seed(config.seed + start)
    contents = random_crops(
        image_files(config.content_dir), config.size, config.batch_size, generator
    )
    styles = random_crops(image_files(config.style_dir), config.size, config.batch_size, generator)
    history: list[float] = []
    bar = tqdm(
        range(start, config.steps),
        desc="train-adain",
        disable=not progress,
        initial=start,
        total=config.steps,
    )
    for step in bar:
        content_loss, style_loss = adain_losses(
            encoder, decoder, next(contents).to(device), next(styles).to(device)
        )
        loss = config.content_weight * content_loss + config.style_weight * style_loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]  # Tensor.backward is unannotated in torch
        optimizer.step()
        schedule.step()
        history.append(float(loss.detach()))
        bar.set_postfix(
            content=f"{float(content_loss.detach()):.3f}", style=f"{float(style_loss.detach()):.3f}"
        )
        done = step + 1
        if done % config.checkpoint_every == 0 or done == config.steps:
            out_dir.mkdir(parents=True, exist_ok=True)
            _save_checkpoint(config, decoder, optimizer, schedule, done)
    return history


def _save_checkpoint(
    config: TrainConfig,
    decoder: Decoder,
    optimizer: torch.optim.Optimizer,
    schedule: torch.optim.lr_scheduler.LRScheduler,
    step: int,
) -> None:
    state = {key.removeprefix("layers."): value for key, value in decoder.state_dict().items()}
    save_state_dict(state, config.decoder_path, metadata={"level": config.level, "step": str(step)})
    extras = {"step": step, "optimizer": optimizer.state_dict(), "schedule": schedule.state_dict()}
    extras["config"] = {key: str(value) for key, value in asdict(config).items()}
    save_training_state(extras, Path(config.out_dir) / STATE_FILE)


def _load_checkpoint(
    config: TrainConfig,
    decoder: Decoder,
    optimizer: torch.optim.Optimizer,
    schedule: torch.optim.lr_scheduler.LRScheduler,
) -> int:
    state_path = Path(config.out_dir) / STATE_FILE
    if not state_path.is_file() or not config.decoder_path.is_file():
        raise FileNotFoundError(f"nothing to resume in {config.out_dir} (no {STATE_FILE})")
    decoder.load_published(load_state_dict(config.decoder_path))
    extras = torch.load(state_path, map_location="cpu", weights_only=True)
    optimizer.load_state_dict(extras["optimizer"])
    schedule.load_state_dict(extras["schedule"])
    return int(extras["step"])
