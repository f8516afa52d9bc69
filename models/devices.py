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


def bf16_supported(device: torch.device | str) -> bool:
    """Whether ``device`` runs bfloat16 natively, i.e. faster than float32.

    CUDA: compute capability 8.0+ (emulated bf16 on older GPUs does not count). CPU: oneDNN
    reports AVX512-BF16 or AMX instructions. Without them torch still *runs* bfloat16 on a
    CPU (autocast included), but by converting to float32 around every kernel, which is
    slower than float32 itself; so "supported" here means native. Other devices: no.
    """
    device = torch.device(device)
    if device.type == "cuda":
        with torch.cuda.device(device):
            return torch.cuda.is_bf16_supported(including_emulation=False)
    return device.type == "cpu" and _cpu_has_native_bf16()


def _cpu_has_native_bf16() -> bool:
    """oneDNN's CPU probe; a private torch op, so its absence counts as "no"."""
    if not torch.backends.mkldnn.is_available():
        return False
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False
