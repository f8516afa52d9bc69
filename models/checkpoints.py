"""Reading and writing checkpoints as plain ``state_dict`` mappings.

Two formats are read:

- ``.pth`` / ``.pt``: torch pickles, loaded with ``torch.load(weights_only=True)`` so
  a file can hold tensors and containers but never run code;
- ``.safetensors``: the safetensors format (no code at all, memory-mapped).

Checkpoints this project writes itself use safetensors.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import Tensor

PICKLE_SUFFIXES = (".pth", ".pt")
SAFETENSORS_SUFFIX = ".safetensors"


def load_state_dict(path: str | Path, *, device: str | torch.device = "cpu") -> dict[str, Tensor]:
    """Load a checkpoint file into a flat ``{name: tensor}`` dict.

    Args:
        path: a ``.pth``/``.pt`` pickle or a ``.safetensors`` file.
        device: where the tensors are placed.

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: unknown suffix, or the file does not hold a flat mapping of tensors.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint not found: {path}")
    suffix = path.suffix.lower()
    if suffix == SAFETENSORS_SUFFIX:
        return load_file(str(path), device=str(device))
    if suffix not in PICKLE_SUFFIXES:
        raise ValueError(
            f"unknown checkpoint format {suffix!r} for {path}; "
            f"expected one of {(*PICKLE_SUFFIXES, SAFETENSORS_SUFFIX)}"
        )
    loaded = torch.load(path, map_location=device, weights_only=True)
    if isinstance(loaded, Mapping) and "state_dict" in loaded:
        loaded = loaded["state_dict"]
    if not isinstance(loaded, Mapping) or not all(
        isinstance(value, Tensor) for value in loaded.values()
    ):
        raise ValueError(f"{path} does not hold a state_dict (a mapping of names to tensors)")
    return {str(key): value for key, value in loaded.items()}


def save_state_dict(
    state: Mapping[str, Tensor], path: str | Path, *, metadata: Mapping[str, str] | None = None
) -> Path:
    """Write ``state`` as a ``.safetensors`` file (tensors made contiguous, on the CPU).

    Args:
        state: ``{name: tensor}``.
        path: destination; must end in ``.safetensors``.
        metadata: optional string pairs stored in the file header.
    """
    path = Path(path)
    if path.suffix.lower() != SAFETENSORS_SUFFIX:
        raise ValueError(f"checkpoints are written as {SAFETENSORS_SUFFIX}, got {path}")
    path.parent.mkdir(parents=True, exist_ok=True)
    tensors = {key: value.detach().to("cpu").contiguous() for key, value in state.items()}
    save_file(tensors, str(path), metadata=dict(metadata or {}))
    return path
