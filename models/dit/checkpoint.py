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


#: The dtypes a checkpoint's weights may be stored in.
STORAGE_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def save_dit(path: str | Path, model: DiT, *, dtype: str = "float32", **info: object) -> Path:
    """Write ``model``'s weights to ``path`` (atomically, via a temporary file).

    ``dtype``: ``"float32"``, or ``"bfloat16"`` (half the bytes; a shipped checkpoint,
    whose weights are an EMA that bfloat16 rounds by at most 2^-8 relative). They are
    loaded back as float32 (:func:`load_dit`). ``info`` (step, loss, preset...) is stored
    JSON-encoded under ``metadata["info"]``.
    """
    if dtype not in STORAGE_DTYPES:
        raise ValueError(f"dtype must be one of {sorted(STORAGE_DTYPES)}, got {dtype!r}")
    metadata = {
        "format": FORMAT,
        "config": model.config.to_json(),
        "info": json.dumps(info, sort_keys=True, default=str),
    }
    storage = STORAGE_DTYPES[dtype]
    state = {name: tensor.to(storage) for name, tensor in model.state_dict().items()}
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
    weights = load_file(str(path), device="cpu")
    model.load_state_dict({name: tensor.float() for name, tensor in weights.items()})
    return model.to(device).eval()
