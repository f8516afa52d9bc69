"""Reading and writing checkpoints as plain ``state_dict`` mappings.

Two formats are read:

- ``.pth`` / ``.pt``: torch pickles, loaded with ``torch.load(weights_only=True)`` so
  a file can hold tensors and containers but never run code;
- ``.safetensors``: the safetensors format (no code at all, memory-mapped).

Checkpoints this project writes itself use safetensors (:func:`save_state_dict`); full
training states (optimizer, step, RNG) are weights-only pickles
(:func:`save_training_state`). Both go through :func:`write_atomically`.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Mapping
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


def write_atomically(path: str | Path, write: Callable[[Path], object]) -> Path:
    """Create or replace ``path`` so that readers see the old file or the whole new one.

    ``write(temporary)`` fills a fresh file beside ``path`` (same folder, so same file
    system), which is then made world-readable (0644) and moved over ``path`` with
    ``os.replace``. If ``write`` fails, the temporary file is removed and ``path`` is
    untouched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(handle)
    temporary = Path(name)
    try:
        write(temporary)
        temporary.chmod(0o644)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return path


def save_training_state(state: Mapping[str, object], path: str | Path) -> Path:
    """Write a training state (tensors, numbers, strings, containers) with ``torch.save``,
    atomically; read it back with ``torch.load(path, weights_only=True)``."""
    return write_atomically(path, lambda temporary: torch.save(dict(state), temporary))


def save_state_dict(
    state: Mapping[str, Tensor], path: str | Path, *, metadata: Mapping[str, str] | None = None
) -> Path:
    """Write ``state`` as a ``.safetensors`` file (tensors made contiguous, on the CPU),
    atomically (:func:`write_atomically`).

    Args:
        state: ``{name: tensor}``.
        path: destination; must end in ``.safetensors``.
        metadata: optional string pairs stored in the file header.
    """
    path = Path(path)
    if path.suffix.lower() != SAFETENSORS_SUFFIX:
        raise ValueError(f"checkpoints are written as {SAFETENSORS_SUFFIX}, got {path}")
    tensors = {key: value.detach().to("cpu").contiguous() for key, value in state.items()}
    return write_atomically(
        path, lambda temporary: save_file(tensors, str(temporary), metadata=dict(metadata or {}))
    )
