"""Fake models with the real models' call signatures, and the test settings.

The fakes compute something simple and checkable, so route tests can assert that
fields reach the model and results come back intact:

* ``FakeStyleTransfer``: ``(1 - alpha) * content + alpha * weighted mean style colour``
  per batch element (the content itself when ``preserve_color``).
* ``FakeTextToImage``: an 8x8 image of uniform noise from ``torch.Generator(seed)``.
"""

from __future__ import annotations

import threading

import torch

from service.config import Settings
from service.workers import ModelEntry, run_generate, run_stylize


class FakeStyleTransfer:
    def __init__(self, device: str = "cpu"):
        self.device = device
        self.batch_sizes: list[int] = []
        self.presets: list[str] = []
        self.gate: threading.Event | None = None
        self.entered = threading.Event()

    def describe(self) -> dict:
        return {"name": "adain", "weight_files": ["/fake/vgg.pth"], "device": self.device}

    def stylize(
        self,
        content,
        styles,
        *,
        style_weights=None,
        alpha=1.0,
        preserve_color=False,
        masks=None,
        preset="quality",
    ):
        self.batch_sizes.append(content.shape[0])
        self.presets.append(preset)
        self.entered.set()
        if self.gate is not None:
            assert self.gate.wait(10)
        if masks is not None and style_weights is not None:
            raise ValueError("style_weights and masks cannot be combined")
        if preserve_color:
            return content.clone()
        weights = style_weights or [1.0] * len(styles)
        total = sum(weights)
        colour = sum(w / total * s.mean(dim=(2, 3)) for w, s in zip(weights, styles, strict=True))
        return (1 - alpha) * content + alpha * colour[:, :, None, None].expand_as(content)


class FakeTextToImage:
    samplers = ("ddim", "ddpm")
    default_steps = 4
    default_guidance_scale = 3.0
    default_plan_layout = True

    def __init__(self):
        self.calls: list[dict] = []

    def describe(self) -> dict:
        return {"name": "dit", "weight_files": ["/fake/dit.safetensors"]}

    def generate(
        self, prompts, *, negative_prompts, steps, guidance_scale, seeds, sampler, plan_layout
    ):
        self.calls.append(
            {
                "prompts": list(prompts),
                "negative_prompts": list(negative_prompts),
                "steps": steps,
                "guidance_scale": guidance_scale,
                "seeds": list(seeds),
                "sampler": sampler,
                "plan_layout": plan_layout,
            }
        )
        images = [torch.rand(3, 8, 8, generator=torch.Generator().manual_seed(s)) for s in seeds]
        return torch.stack(images)


class Fakes:
    """Holds the fake instances an app loaded, one per (model, device)."""

    def __init__(self):
        self.adain: dict[str, FakeStyleTransfer] = {}
        self.dit: dict[str, FakeTextToImage] = {}

    def entries(self) -> dict[str, ModelEntry]:
        def load_adain(search_path, device):
            return self.adain.setdefault(device, FakeStyleTransfer(device))

        def load_dit(search_path, device):
            return self.dit.setdefault(device, FakeTextToImage())

        return {
            "adain": ModelEntry("adain", load_adain, run_stylize),
            "dit": ModelEntry("dit", load_dit, run_generate),
        }


def make_settings(**overrides) -> Settings:
    options = {
        "devices": "cpu",
        "max_batch_size": 4,
        "max_batch_wait_ms": 1.0,
        "queue_size": 16,
        "request_timeout_s": 30.0,
        "max_upload_bytes": 2 * 1024 * 1024,
        "max_pixels": 4_000_000,
        "max_side": 1024,
        "load_models": "adain,dit",
        "_env_file": None,
    }
    options.update(overrides)
    return Settings(**options)
