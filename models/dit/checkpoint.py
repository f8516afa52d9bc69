"""DiT checkpoints: safetensors weights with the :class:`DiTConfig` in the metadata."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import load_file

from models.checkpoints import save_state_dict
from models.dit.config import DiTConfig
from models.dit.model import DiT

#: ``metadata["format"]`` of every DiT checkpoint this project writes.
FORMAT = "atelier-dit/2"  # 2: fixed sin-cos position embeddings (not stored)


def save_dit(path: str | Path, model: DiT, **info: object) -> Path:
    """Write ``model``'s float32 weights to ``path`` (atomically, via a temporary file).

    ``info`` (step, loss, preset...) is stored JSON-encoded under ``metadata["info"]``.
    """
    metadata = {
        "format": FORMAT,
        "config": model.config.to_json(),
        "info": json.dumps(info, sort_keys=True, default=str),
    }
    state = {name: tensor.float() for name, tensor in model.state_dict().items()}
    return save_state_dict(state, path, metadata=metadata)


def read_metadata(path: str | Path) -> tuple[DiTConfig, dict[str, Any]]:
    """The config and the ``info`` dict of a checkpoint, without loading its tensors."""
    with safe_open(str(path), framework="pt") as handle:
        metadata = handle.metadata() or {}
    if metadata.get("format") != FORMAT:
        raise ValueError(
            f"{path} is not an Atelier DiT checkpoint of format {FORMAT!r} "
            f"(its format: {metadata.get('format')!r}); retrain it with `atelier train-dit`"
        )
    return DiTConfig.from_json(metadata["config"]), json.loads(metadata.get("info", "{}"))


def load_dit(path: str | Path, *, device: torch.device | str = "cpu") -> DiT:
    """Build the DiT described by the checkpoint's config and load its weights (eval mode)."""
    config, _ = read_metadata(path)
    model = DiT(config)
    model.load_state_dict(load_file(str(path), device="cpu"))
    return model.to(device).eval()
