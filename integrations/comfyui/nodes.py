"""Atelier's ComfyUI nodes, built on ``atelier-client``.

* **Atelier Settings**: the server's URL and API key, for the other nodes' ``atelier``
  input (without it they read ``ATELIER_SERVER`` and ``ATELIER_API_KEY``).
* **Atelier Stylize**: each IMAGE of a batch painted in the style of one to four
  paintings (their weights, alpha, colour preservation, a MASK per painting, preset,
  style scale, size up to print size: a print runs as a job, its tiles on the progress bar).
* **Atelier Stylize Frames**: a batch of frames painted as one clip through the
  server's video path (stable from frame to frame), frames on the progress bar.
* **Atelier Generate**: a prompt drawn as an IMAGE batch (seed, steps, guidance).

IMAGE tensors are ComfyUI's ``(B, H, W, C)`` float in ``[0, 1]``; MASK ``(B, H, W)``.
Progress goes to ComfyUI's ``comfy.utils.ProgressBar`` when ComfyUI is there, else
nowhere.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import torch
from atelier_client import Client, GenerateOptions, Progress
from atelier_client.options import Preset

from .tensors import frames_to_image, image_to_png, mask_to_png, png_to_image, to_uint8
from .video import clip_to_frames, frames_to_clip

CATEGORY = "Atelier"
PRESETS = ["quality", "realtime"]
MAX_PAINTINGS = 4
#: The server's largest print side (``max_side`` may be lower; the server says so).
MAX_SIZE = 8192


@dataclass(frozen=True)
class AtelierSettings:
    """Where the nodes send their work (``None``: the environment's)."""

    server: str | None = None
    api_key: str | None = None

    def client(self) -> Client:
        return Client(self.server or None, api_key=self.api_key or None)


def _settings(atelier: AtelierSettings | None) -> AtelierSettings:
    return atelier if atelier is not None else AtelierSettings()


def comfy_progress() -> Callable[[Progress], None] | None:
    """A callback that moves ComfyUI's progress bar; ``None`` outside ComfyUI."""
    try:
        from comfy.utils import ProgressBar
    except ImportError:
        return None
    bars: dict[int, Any] = {}

    def report(progress: Progress) -> None:
        if not progress.total:
            return
        bar = bars.get(progress.total)
        if bar is None:
            bar = bars[progress.total] = ProgressBar(progress.total)
        bar.update_absolute(progress.step, progress.total)

    return report


_SETTINGS_INPUT = {"atelier": ("ATELIER_SETTINGS", {"tooltip": "from Atelier Settings"})}


class AtelierSettingsNode:
    """The server and key for the other Atelier nodes (else ``ATELIER_SERVER`` and
    ``ATELIER_API_KEY``)."""

    @classmethod
    def INPUT_TYPES(cls) -> dict[str, Any]:
        return {
            "required": {
                "server": ("STRING", {"default": os.environ.get("ATELIER_SERVER", "")}),
                "api_key": ("STRING", {"default": ""}),
            }
        }

    RETURN_TYPES = ("ATELIER_SETTINGS",)
    RETURN_NAMES = ("atelier",)
    FUNCTION = "settings"
    CATEGORY = CATEGORY

    def settings(self, server: str, api_key: str) -> tuple[AtelierSettings]:
        return (AtelierSettings(server.strip() or None, api_key.strip() or None),)


def _style_inputs() -> dict[str, Any]:
    return {
        "alpha": ("FLOAT", {"default": 1.0, "min": 0.0, "max": 1.0, "step": 0.05}),
        "preserve_color": ("BOOLEAN", {"default": False}),
        "preset": (PRESETS, {"default": "quality"}),
        "style_scale": ("FLOAT", {"default": 1.0, "min": 0.25, "max": 2.0, "step": 0.05}),
    }


def _weights(text: str, count: int) -> list[float] | None:
    """``"2,1"`` -> ``[2.0, 1.0]``; empty -> ``None`` (equal weights)."""
    if not text.strip():
        return None
    try:
        weights = [float(part) for part in text.split(",")]
    except ValueError:
        raise ValueError(f"weights: comma-separated numbers, got {text!r}") from None
    if len(weights) != count:
        raise ValueError(f"weights: {count} paintings need {count} weights, got {len(weights)}")
    return weights


class AtelierStylize:
    """Each IMAGE of the batch painted in the style of one to four paintings."""

    @classmethod
    def INPUT_TYPES(cls) -> dict[str, Any]:
        optional: dict[str, Any] = {
            f"painting_{k}": ("IMAGE",) for k in range(2, MAX_PAINTINGS + 1)
        }
        optional |= {f"mask_{k}": ("MASK",) for k in range(1, MAX_PAINTINGS + 1)}
        optional |= _SETTINGS_INPUT
        return {
            "required": {
                "image": ("IMAGE",),
                "painting": ("IMAGE",),
                **_style_inputs(),
                "weights": ("STRING", {"default": "", "tooltip": "e.g. 2,1: one per painting"}),
                "size": ("INT", {"default": 512, "min": 16, "max": MAX_SIZE, "step": 16}),
            },
            "optional": optional,
        }

    RETURN_TYPES = ("IMAGE",)
    FUNCTION = "stylize"
    CATEGORY = CATEGORY

    def stylize(
        self,
        image: torch.Tensor,
        painting: torch.Tensor,
        alpha: float,
        preserve_color: bool,
        preset: str,
        style_scale: float,
        weights: str,
        size: int,
        atelier: AtelierSettings | None = None,
        **extra: torch.Tensor,
    ) -> tuple[torch.Tensor]:
        paintings = [painting] + [
            extra[f"painting_{k}"]
            for k in range(2, MAX_PAINTINGS + 1)
            if extra.get(f"painting_{k}") is not None
        ]
        masks = [
            mask_to_png(extra[f"mask_{k}"])
            for k in range(1, MAX_PAINTINGS + 1)
            if extra.get(f"mask_{k}") is not None
        ]
        styles = [image_to_png(item[:1]) for item in paintings]
        options: dict[str, Any] = {
            "alpha": alpha,
            "preserve_color": preserve_color,
            "preset": preset,
            "style_scale": style_scale,
            "size": size,
        }
        style_weights = _weights(weights, len(paintings))
        if style_weights is not None:
            options["style_weights"] = style_weights
        outputs = []
        with _settings(atelier).client() as client:
            for photo in image:
                result = client.stylize(
                    image_to_png(photo),
                    styles,
                    masks=masks or None,
                    progress=comfy_progress(),
                    **options,
                )
                outputs.append(png_to_image(result.content))
        return (_stack(outputs),)


def _stack(images: list[torch.Tensor]) -> torch.Tensor:
    """IMAGEs ``(1, H_i, W_i, 3)`` as one batch; pictures of other sizes than the first
    are resized to it (a batch holds one size)."""
    height, width = images[0].shape[1:3]
    same = [
        item
        if item.shape[1:3] == (height, width)
        else torch.nn.functional.interpolate(
            item.permute(0, 3, 1, 2), size=(height, width), mode="bilinear", align_corners=False
        ).permute(0, 2, 3, 1)
        for item in images
    ]
    return torch.cat(same)


class AtelierStylizeFrames:
    """A batch of frames painted as one clip (the server's video path: each frame
    stable against the last), frame by frame on the progress bar."""

    @classmethod
    def INPUT_TYPES(cls) -> dict[str, Any]:
        return {
            "required": {
                "frames": ("IMAGE",),
                "painting": ("IMAGE",),
                **_style_inputs(),
                "fps": ("INT", {"default": 24, "min": 1, "max": 60}),
            },
            "optional": dict(_SETTINGS_INPUT),
        }

    RETURN_TYPES = ("IMAGE",)
    FUNCTION = "stylize_frames"
    CATEGORY = CATEGORY

    def stylize_frames(
        self,
        frames: torch.Tensor,
        painting: torch.Tensor,
        alpha: float,
        preserve_color: bool,
        preset: str,
        style_scale: float,
        fps: int,
        atelier: AtelierSettings | None = None,
    ) -> tuple[torch.Tensor]:
        height, width = int(frames.shape[1]), int(frames.shape[2])
        clip = frames_to_clip(to_uint8(frames[..., :3]), fps)
        with _settings(atelier).client() as client:
            result = client.stylize(
                clip,
                image_to_png(painting[:1]),
                progress=comfy_progress(),
                alpha=alpha,
                preserve_color=preserve_color,
                preset=cast(Preset, preset),
                style_scale=style_scale,
            )
        return (frames_to_image(clip_to_frames(result.content, height, width)),)


class AtelierGenerate:
    """A prompt drawn by the server's text-to-image model, as an IMAGE batch."""

    @classmethod
    def INPUT_TYPES(cls) -> dict[str, Any]:
        return {
            "required": {
                "prompt": ("STRING", {"multiline": True, "default": "a red circle"}),
                "seed": ("INT", {"default": 0, "min": 0, "max": 2**31 - 1}),
                "steps": ("INT", {"default": 50, "min": 1, "max": 1000}),
                "guidance": ("FLOAT", {"default": 3.0, "min": 0.0, "max": 50.0, "step": 0.1}),
                "num_images": ("INT", {"default": 1, "min": 1, "max": 8}),
            },
            "optional": {
                "negative_prompt": ("STRING", {"multiline": True, "default": ""}),
                **_SETTINGS_INPUT,
            },
        }

    RETURN_TYPES = ("IMAGE",)
    FUNCTION = "generate"
    CATEGORY = CATEGORY

    def generate(
        self,
        prompt: str,
        seed: int,
        steps: int,
        guidance: float,
        num_images: int,
        negative_prompt: str = "",
        atelier: AtelierSettings | None = None,
    ) -> tuple[torch.Tensor]:
        with _settings(atelier).client() as client:
            progress = comfy_progress()
            options = GenerateOptions(
                seed=seed, steps=steps, guidance_scale=guidance, num_images=num_images
            )
            if negative_prompt.strip():
                options["negative_prompt"] = negative_prompt
            result = client.generate(
                prompt, as_job=progress is not None, progress=progress, **options
            )
        return (_stack([png_to_image(data) for data in result.images]),)


NODE_CLASS_MAPPINGS: dict[str, type] = {
    "AtelierSettings": AtelierSettingsNode,
    "AtelierStylize": AtelierStylize,
    "AtelierStylizeFrames": AtelierStylizeFrames,
    "AtelierGenerate": AtelierGenerate,
}
NODE_DISPLAY_NAME_MAPPINGS: dict[str, str] = {
    "AtelierSettings": "Atelier Settings",
    "AtelierStylize": "Atelier Stylize",
    "AtelierStylizeFrames": "Atelier Stylize Frames",
    "AtelierGenerate": "Atelier Generate",
}
