"""Which devices to run on, and what they support: the one place that asks torch."""

from __future__ import annotations

import torch


def device_list(spec: str = "auto") -> list[str]:
    """Resolve a device spec to torch device names, in order.

    ``"auto"``: every CUDA device, else Apple MPS, else the CPU. Otherwise a comma list
    such as ``"cuda:0,cuda:1"`` or ``"cpu"``, kept as given (blanks dropped).

    Raises:
        ValueError: an empty list, or a name torch does not parse as a device.
    """
    if spec.strip().lower() == "auto":
        if torch.cuda.is_available():
            return [f"cuda:{i}" for i in range(torch.cuda.device_count())]
        if torch.backends.mps.is_available():
            return ["mps"]
        return ["cpu"]
    names = [name.strip() for name in spec.split(",") if name.strip()]
    if not names:
        raise ValueError(f"no device named in {spec!r}; use 'auto' or e.g. 'cpu' or 'cuda:0'")
    for name in names:
        try:
            torch.device(name)
        except RuntimeError as exc:
            raise ValueError(f"not a torch device: {name!r} ({exc})") from None
    return names
