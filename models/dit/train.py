"""Training loop for the text-to-image DiT: the everyday-things world at 64 px (the
captioned-shapes world at 32 px for the shapes presets).

AdamW with linear warmup and an optional linear cooldown to zero at the end, an
exponential moving average (EMA) of the weights, bfloat16 autocast where supported,
gradient clipping, classifier-free-guidance condition dropout (the learned null condition
replaces a random share of captions), a tqdm progress bar, periodic checkpoints and exact
resume (model, EMA, optimizer, step and RNG state).

The batch of step ``k`` is items ``[k * B, (k + 1) * B)`` of a deterministic dataset
(:func:`training_stream`), so resuming continues the same data stream; with
``num_workers`` the items are made by a :class:`~torch.utils.data.DataLoader`'s worker
processes in the same order (the GPU run needs them: one process renders too few scenes
to keep an accelerator busy).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import time
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file
from torch.utils.data import DataLoader, Dataset
from tqdm import tqdm

from models.checkpoints import save_training_state
from models.devices import autocast_dtype, hardware_name
from models.diffusion import diffusion_loss, get_schedule
from models.diffusion.losses import WEIGHTINGS
from models.dit.checkpoint import read_metadata, save_dit
from models.dit.config import DiTConfig, get_preset
from models.dit.model import DiT
from models.text_encoder import TextEncoder

#: Index range of the endless training stream.
_STREAM_LENGTH = 2**62


def training_stream(
    config: DiTConfig, *, seed: int, things: int | None = None
) -> Dataset[tuple[torch.Tensor, str]]:
    """The endless training split of the model's world (``DiTConfig.world``).

    Args:
        config: the architecture; its ``image_size`` picks the world.
        seed: the stream's seed.
        things: train on the first ``things`` objects of the vocabulary only (a
            CPU-sized proof of the recipe); ``None``: all of them.
    """
    if config.world == "shapes":
        if things is not None:
            raise ValueError("a things subset needs a 64 px preset (the things world)")
        from models.shapes import ShapesDataset

        return ShapesDataset("train", seed=seed, length=_STREAM_LENGTH)
    from models.things import ThingsDataset

    return ThingsDataset("train", seed=seed, length=_STREAM_LENGTH, things=things)


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation settings (the architecture is the preset's :class:`DiTConfig`).

    Args:
        preset: name in :data:`models.dit.config.PRESETS`.
        batch_size: images per step.
        lr: peak AdamW learning rate, reached after ``warmup_steps`` (linear warmup).
        cooldown_steps: if > 0, the rate then falls linearly to 0 over the last
            ``cooldown_steps`` steps before the ``max_steps`` given to :meth:`Trainer.fit`
            (warmup-stable-decay); as it is not part of the data stream, a resumed run may
            add or change it, e.g. to anneal a run that trained at a constant rate.
        weight_decay: AdamW decoupled weight decay.
        ema_decay: EMA decay ``d``; the effective decay at update ``n`` is
            ``min(d, (1 + n) / (10 + n))`` so early averages are not stuck at init.
        cond_dropout: probability of replacing a caption by the null condition.
        weighting: the per-timestep loss weight, ``"none"`` or ``"min-snr"``
            (:func:`models.diffusion.losses.loss_weights`, gamma 5).
        things: with a 64 px preset, train on the first ``things`` objects of the
            vocabulary only (a CPU-sized run); ``None`` trains on all of them.
        num_workers: processes that make the training items (0: the training process).
        grad_clip: max global gradient norm (0 disables clipping).
        precision: ``"auto"`` (bfloat16 autocast where the device runs it natively),
            ``"bf16"`` or ``"fp32"`` (see :func:`models.devices.autocast_dtype`).
        seed: seeds the initial weights, the data stream and the noise.
    """

    preset: str = "shapes32"
    batch_size: int = 64
    lr: float = 6e-4
    weight_decay: float = 0.0
    warmup_steps: int = 200
    cooldown_steps: int = 0
    ema_decay: float = 0.998
    cond_dropout: float = 0.1
    weighting: str = "none"
    things: int | None = None
    num_workers: int = 0
    grad_clip: float = 1.0
    precision: str = "auto"
    seed: int = 0

    def __post_init__(self) -> None:
        get_preset(self.preset)
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.lr <= 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        if self.warmup_steps < 0 or self.cooldown_steps < 0:
            raise ValueError("warmup_steps and cooldown_steps must be >= 0")
        if not 0 <= self.ema_decay < 1:
            raise ValueError(f"ema_decay must be in [0, 1), got {self.ema_decay}")
        if not 0 <= self.cond_dropout <= 1:
            raise ValueError(f"cond_dropout must be in [0, 1], got {self.cond_dropout}")
        if self.weighting not in WEIGHTINGS:
            raise ValueError(f"weighting must be one of {WEIGHTINGS}, got {self.weighting!r}")
        if self.things is not None and self.things < 1:
            raise ValueError(f"things must be >= 1, got {self.things}")
        if self.num_workers < 0:
            raise ValueError(f"num_workers must be >= 0, got {self.num_workers}")
        if self.precision not in ("auto", "bf16", "fp32"):
            raise ValueError(f"precision must be auto, bf16 or fp32, got {self.precision!r}")


def _batch_indices(step: int, batch_size: int) -> range:
    return range(step * batch_size, (step + 1) * batch_size)


def _collate(items: list[tuple[torch.Tensor, str]]) -> tuple[torch.Tensor, list[str]]:
    """``(image, caption)`` items -> ``(B, C, H, W)`` images in ``[0, 1]`` and captions."""
    return torch.stack([image for image, _ in items]), [caption for _, caption in items]


class _StepBatches:
    """The batch sampler of the stream from ``start``: step ``k``'s indices are
    :func:`_batch_indices` ``(k, batch_size)``, endlessly."""

    def __init__(self, start: int, batch_size: int) -> None:
        self.start, self.batch_size = start, batch_size

    def __iter__(self) -> Iterator[list[int]]:
        step = self.start
        while True:
            yield list(_batch_indices(step, self.batch_size))
            step += 1


class Trainer:
    """Owns the model, its EMA, the optimizer and the training stream.

    Args:
        config: optimisation settings.
        encoder: turns captions into a :class:`~models.text_encoder.TextCondition`
            (cached, so repeated captions cost nothing).
        dataset: ``(image (3, H, W) in [0, 1], caption)`` items indexed from 0; defaults
            to :func:`training_stream` of the model's world.
        device: where to train.
        model_config: overrides the preset's architecture (tests).
    """

    def __init__(
        self,
        config: TrainConfig,
        *,
        encoder: TextEncoder,
        dataset: Dataset[tuple[torch.Tensor, str]] | None = None,
        device: torch.device | str = "cpu",
        model_config: DiTConfig | None = None,
    ) -> None:
        self.config = config
        self.model_config = model_config or get_preset(config.preset)
        if self.model_config.text_dim != encoder.dim:
            raise ValueError(
                f"encoder width {encoder.dim} != model text_dim {self.model_config.text_dim}"
            )
        self.device = torch.device(device)
        self.encoder = encoder
        if dataset is None:
            dataset = training_stream(self.model_config, seed=config.seed, things=config.things)
        self.dataset = dataset
        self._loader: Iterator[tuple[torch.Tensor, list[str]]] | None = None
        self._loader_step = -1
        torch.manual_seed(config.seed)
        self.model = DiT(self.model_config).to(self.device)
        self.ema = copy.deepcopy(self.model).requires_grad_(False).eval()
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=config.lr, weight_decay=config.weight_decay
        )
        self.alpha_bar = get_schedule(self.model_config.schedule, self.model_config.num_timesteps)
        self.generator = torch.Generator().manual_seed(config.seed)
        self.autocast = autocast_dtype(self.device, config.precision)
        self.step = 0
        #: Seconds spent in :meth:`train_step`, over every resumed part of the run.
        self.train_seconds = 0.0
        #: The run's last step, set by :meth:`fit` (the cooldown ends there).
        self.max_steps: int | None = None

    def learning_rate(self, step: int) -> float:
        """``lr * min(1, (step + 1) / warmup) * clip((max_steps - step) / cooldown, 0, 1)``.

        The cooldown factor applies only with ``cooldown_steps > 0`` and a known end.
        """
        rate = self.config.lr
        warmup, cooldown = self.config.warmup_steps, self.config.cooldown_steps
        if warmup:
            rate *= min(1.0, (step + 1) / warmup)
        if cooldown and self.max_steps is not None:
            rate *= min(1.0, max(0.0, (self.max_steps - step) / cooldown))
        return rate

    def batch(self, step: int) -> tuple[torch.Tensor, list[str]]:
        """Images in ``[-1, 1]`` ``(B, C, H, W)`` on the device, and their captions: items
        ``[step * B, (step + 1) * B)`` of the dataset."""
        images, captions = _collate(
            [self.dataset[i] for i in _batch_indices(step, self.config.batch_size)]
        )
        return images.to(self.device) * 2 - 1, captions

    def _next_batch(self) -> tuple[torch.Tensor, list[str]]:
        """The batch of :attr:`step`, from the worker processes when ``num_workers > 0``
        (the same items as :meth:`batch`, made ahead of time in order)."""
        if self.config.num_workers == 0:
            return self.batch(self.step)
        if self._loader is None or self._loader_step != self.step:
            loader = DataLoader(
                self.dataset,
                batch_sampler=_StepBatches(self.step, self.config.batch_size),
                num_workers=self.config.num_workers,
                collate_fn=_collate,
                pin_memory=self.device.type == "cuda",
                persistent_workers=False,
                prefetch_factor=4,
            )
            self._loader = iter(loader)
        images, captions = next(self._loader)
        self._loader_step = self.step + 1
        return images.to(self.device, non_blocking=True) * 2 - 1, captions

    def train_step(self) -> float:
        """One optimisation step; returns the loss."""
        x0, captions = self._next_batch()
        cond = self.encoder.encode(captions).to(self.device)
        drop = torch.rand(len(captions), generator=self.generator) < self.config.cond_dropout
        for group in self.optimizer.param_groups:
            group["lr"] = self.learning_rate(self.step)
        self.model.train()
        context = (
            torch.autocast(self.device.type, dtype=self.autocast)
            if self.autocast
            else nullcontext()
        )
        with context:
            cond = self.model.with_null(cond, drop)
            loss = diffusion_loss(
                self.model,
                x0,
                cond,
                self.alpha_bar,
                prediction=self.model_config.prediction,
                generator=self.generator,
                weighting=self.config.weighting,
            )
        loss.backward()  # type: ignore[no-untyped-call]  # Tensor.backward is unannotated in torch
        if self.config.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.grad_clip)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self._update_ema()
        self.step += 1
        return float(loss.detach())

    @torch.no_grad()
    def _update_ema(self) -> None:
        decay = min(self.config.ema_decay, (1 + self.step) / (10 + self.step))
        ema_params: list[torch.Tensor] = list(self.ema.parameters())
        model_params: list[torch.Tensor] = list(self.model.parameters())
        torch._foreach_lerp_(ema_params, model_params, 1.0 - decay)

    def state_dict(self) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "ema": self.ema.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "step": self.step,
            "train_seconds": self.train_seconds,
            "generator": self.generator.get_state(),
            "train_config": dataclasses.asdict(self.config),
            "model_config": self.model_config.to_json(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if DiTConfig.from_json(state["model_config"]) != self.model_config:
            raise ValueError("the saved state is for a different model configuration")
        saved = state["train_config"]
        for name in ("seed", "batch_size", "things"):  # they define the data stream
            if saved.get(name) != getattr(self.config, name):
                raise ValueError(
                    f"the saved state used {name}={saved[name]}, not {getattr(self.config, name)}"
                )
        self.model.load_state_dict(state["model"])
        self.ema.load_state_dict(state["ema"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.step = int(state["step"])
        self.train_seconds = float(state.get("train_seconds", 0.0))
        self.generator.set_state(state["generator"])

    def save(self, path: str | Path) -> Path:
        """Write the full training state (for :meth:`resume`) atomically."""
        return save_training_state(self.state_dict(), path)

    def initialize_from(self, path: str | Path) -> None:
        """Start from an inference checkpoint's weights (fine-tuning): model and EMA both.

        The checkpoint's architecture must be this run's, except that this run may add
        text position embeddings (``text_positions``), which start at zero, so the model
        starts as exactly the checkpoint's. Optimizer, step and data stream start afresh.

        Raises:
            ValueError: when the architectures differ in anything else.
        """
        source, _ = read_metadata(path)
        mine = dataclasses.replace(self.model_config, text_positions=0)
        if dataclasses.replace(source, text_positions=0) != mine:
            raise ValueError(
                f"{path} holds a different architecture: {source} (this run: {self.model_config})"
            )
        if source.text_positions not in (0, self.model_config.text_positions):
            raise ValueError(
                f"{path} has text_positions={source.text_positions}, "
                f"this run {self.model_config.text_positions}"
            )
        weights = {name: t.float() for name, t in load_file(str(path), device="cpu").items()}
        missing, unexpected = self.model.load_state_dict(weights, strict=False)
        if unexpected or set(missing) - {"text_position"}:
            raise ValueError(f"weights do not fit: missing {missing}, unexpected {unexpected}")
        self.ema.load_state_dict(self.model.state_dict())

    def resume(self, path: str | Path) -> None:
        """Restore a state written by :meth:`save`, whatever device this run is on.

        The file is read onto the CPU: the data-stream generator is a CPU generator, whose
        state (a ByteTensor) must stay there (``map_location=<cuda>`` would move it and
        ``Generator.set_state`` would refuse it); the weights and the optimizer state are
        copied to the model's device by ``load_state_dict``.
        """
        self.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))

    def export(self, path: str | Path, *, dtype: str = "float32", **info: object) -> Path:
        """Save the EMA weights as an inference checkpoint (safetensors + config, in
        ``dtype``); its ``info`` records the text encoder's name, by which the pipeline
        rebuilds it, and how far training went."""
        return save_dit(
            path,
            self.ema,
            dtype=dtype,
            text_encoder=self.encoder.name,
            step=self.step,
            samples=self.step * self.config.batch_size,
            hardware=hardware_name(self.device),
            train_hours=round(self.train_seconds / 3600, 4),
            train_config=dataclasses.asdict(self.config),
            **info,
        )

    def fit(
        self,
        max_steps: int,
        *,
        time_limit_s: float = math.inf,
        checkpoint_every_s: float = math.inf,
        on_checkpoint: Callable[[Trainer, float], None] | None = None,
        progress: bool = True,
    ) -> float:
        """Train until ``max_steps`` (total, counting resumed steps) or the time limit.

        ``on_checkpoint(trainer, smoothed_loss)`` runs every ``checkpoint_every_s`` seconds
        and once at the end. Returns the smoothed loss.
        """
        self.max_steps = max_steps
        start = last_checkpoint = time.monotonic()
        smoothed = math.nan
        bar = tqdm(total=max_steps, initial=self.step, disable=not progress, unit="step")
        while self.step < max_steps and time.monotonic() - start < time_limit_s:
            began = time.monotonic()
            loss = self.train_step()
            self.train_seconds += time.monotonic() - began
            smoothed = loss if math.isnan(smoothed) else 0.98 * smoothed + 0.02 * loss
            bar.update(1)
            bar.set_postfix(loss=f"{smoothed:.4f}", lr=f"{self.learning_rate(self.step):.1e}")
            if on_checkpoint and time.monotonic() - last_checkpoint >= checkpoint_every_s:
                on_checkpoint(self, smoothed)
                last_checkpoint = time.monotonic()
        bar.close()
        if on_checkpoint:
            on_checkpoint(self, smoothed)
        return smoothed


def run_training(
    config: TrainConfig,
    *,
    encoder: TextEncoder,
    device: str,
    run_dir: Path,
    export: Path,
    max_steps: int,
    time_limit_s: float = math.inf,
    checkpoint_every_s: float = math.inf,
    resume: bool = False,
    init_from: Path | None = None,
    dtype: str = "float32",
    progress: bool = True,
) -> Trainer:
    """One training run as ``atelier train-dit`` (and the GPU script) runs it.

    Resumes from ``run_dir/train_state.pt`` when ``resume`` and it exists, else starts
    from ``init_from``'s weights when given (a fine-tune, or the next leg of a run whose
    full state could not travel), else from scratch. At every checkpoint it writes the
    full state (for ``resume``) and exports the EMA weights to ``export`` in ``dtype``;
    the export's info records the lineage: ``total_samples`` and ``total_train_hours``
    add this run's to those of the checkpoint it started from. Prints one JSON line per
    checkpoint.
    """
    state_path = run_dir / "train_state.pt"
    trainer = Trainer(config, encoder=encoder, device=device)
    if resume and state_path.exists():
        trainer.resume(state_path)
        print(f"resumed from {state_path} at step {trainer.step}")
    elif init_from is not None:
        trainer.initialize_from(init_from)
        print(f"initialised from {init_from}")
    start: dict[str, Any] = read_metadata(init_from)[1] if init_from is not None else {}
    lineage: dict[str, Any] = {}
    if init_from is not None:  # kept on resume, so every export names its start
        lineage["init_from"] = {k: start.get(k) for k in ("step", "samples", "init_from")}
    print(
        f"training {config.preset} ({trainer.model.num_parameters():,} parameters) on "
        f"{device}, autocast={trainer.autocast}"
    )

    def checkpoint(trainer: Trainer, loss: float) -> None:
        trainer.save(state_path)
        samples = trainer.step * trainer.config.batch_size
        hours = trainer.train_seconds / 3600
        trainer.export(
            export,
            dtype=dtype,
            preset=config.preset,
            loss=loss,
            total_samples=samples + int(start.get("total_samples", start.get("samples", 0))),
            total_train_hours=round(hours + float(start.get("total_train_hours", 0.0)), 4),
            **lineage,
        )
        record = {"step": trainer.step, "loss": loss, "export": str(export)}
        print(json.dumps(record), flush=True)

    trainer.fit(
        max_steps,
        time_limit_s=time_limit_s,
        checkpoint_every_s=checkpoint_every_s,
        on_checkpoint=checkpoint,
        progress=progress,
    )
    return trainer
