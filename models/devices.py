"""Which devices to run on, and what they support: the one place that asks torch; and
host memory given back to the OS (:func:`return_freed_memory`)."""

from __future__ import annotations

import ctypes
import platform
import sys
from collections.abc import Callable, Collection
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

INDEX_LIMIT = 2**31 - 1
"""Elements a tensor may hold in CUDA kernels that index with 32-bit integers (reflection
padding refuses more: "input tensor must fit into 32-bit index math", seen on an H200 with
a batch of 32 photos of 1024 px, whose relu1_1 map padded is 32 x 64 x 1026^2 = 2.16e9)."""


def index_safe_slices(batch: int, elements_per_image: int) -> list[slice]:
    """Slices of a batch of ``batch`` images, each slice of whole images holding at most
    :data:`INDEX_LIMIT` elements at ``elements_per_image`` each (one image per slice at
    least). One slice, ``slice(0, batch)``, when the whole batch fits.

    >>> index_safe_slices(5, 2**29)
    [slice(0, 3, None), slice(3, 5, None)]
    """
    per_slice = max(1, INDEX_LIMIT // max(1, elements_per_image))
    return [slice(start, min(start + per_slice, batch)) for start in range(0, batch, per_slice)]


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
            supported: bool = torch.cuda.is_bf16_supported(including_emulation=False)
            return supported
    return device.type == "cpu" and _cpu_has_native_bf16()


def _cpu_has_native_bf16() -> bool:
    """oneDNN's CPU probe; a private torch op, so its absence counts as "no"."""
    if not torch.backends.mkldnn.is_available():  # type: ignore[no-untyped-call]  # unannotated in torch
        return False
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


#: Precision names of training and inference: see :func:`autocast_dtype`.
PRECISIONS = ("auto", "bf16", "fp32")


def hardware_name(device: torch.device | str) -> str:
    """A readable name of the hardware behind ``device``: the GPU's name for CUDA, else
    the CPU's model name and the threads torch uses (what a checkpoint records of where
    it trained)."""
    device = torch.device(device)
    if device.type == "cuda":
        return str(torch.cuda.get_device_name(device))
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{model} ({torch.get_num_threads()} threads)"


def autocast_dtype(device: torch.device, precision: str) -> torch.dtype | None:
    """The autocast dtype for ``precision`` on ``device`` (``None``: run in float32).

    ``"auto"``: bfloat16 where the device runs it natively (:func:`bf16_supported`), else
    float32. ``"bf16"``: bfloat16, also on a CPU without native kernels (autocast
    emulates it there, slower than float32).

    Raises:
        ValueError: an unknown precision, or ``"bf16"`` on a non-CPU device without
            native bfloat16.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    if precision == "fp32":
        return None
    native = bf16_supported(device)
    if precision == "bf16" and not native and device.type != "cpu":
        raise ValueError(f"bfloat16 autocast is not supported on {device}")
    return torch.bfloat16 if native or precision == "bf16" else None


def to_device(
    tensor: torch.Tensor, device: torch.device | str, dtype: torch.dtype | None = None
) -> torch.Tensor:
    """``tensor`` on ``device`` (and in ``dtype``), without making the host wait.

    A CPU tensor bound for a GPU goes through page-locked memory and is copied
    asynchronously (a copy from pageable memory blocks the host until it is done); the
    dtype conversion then runs on the device. Anything else is a plain ``.to``.
    """
    device = torch.device(device)
    if device.type == "cuda" and tensor.device.type == "cpu":
        tensor = tensor.pin_memory().to(device, non_blocking=True)
    return tensor.to(device=device, dtype=dtype)


def to_host(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` on the CPU; from a GPU through page-locked memory.

    A copy from a GPU into pageable memory crawls: the H200's AdaIN pass at 512 px, batch
    32, spent 76 ms of its 145 ms host-to-host moving the 100 MB float32 result into
    pageable memory (a 1.8 ms copy the other way from page-locked memory). The copy goes
    into a page-locked buffer (torch caches those) and the host waits for it once.
    A CPU tensor is returned as it is.
    """
    if tensor.device.type != "cuda":
        return tensor.cpu()
    host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
    host.copy_(tensor, non_blocking=True)
    torch.cuda.current_stream(tensor.device).synchronize()
    return host


class HostReads(TorchFunctionMode):
    """Counts, while active, the tensor operations that read values back to the host.

    On a GPU each of them waits for the device to finish its queue (a sync): ``bool()``,
    ``int()``, ``float()``, ``.item()``, ``.tolist()``, ``.numpy()``, ``.cpu()``,
    ``.nonzero()`` and indexing with a boolean mask. On the CPU they cost nothing, but
    counting them there shows where a GPU would wait; ``torch.cuda.set_sync_debug_mode``
    is the check on a GPU (``benchmarks/gpu_check.py`` uses both).

    >>> with HostReads() as reads:
    ...     model(x)
    >>> reads.names  # e.g. ['__bool__']
    """

    READS = frozenset(
        {
            "__bool__",
            "__int__",
            "__float__",
            "__index__",
            "item",
            "tolist",
            "numpy",
            "cpu",
            "nonzero",
        }
    )

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Collection[type],
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:  # whatever ``func`` returns: any torch function passes through
        name = getattr(func, "__name__", "")
        if name in self.READS or (name == "__getitem__" and _boolean_index(args)):
            self.names.append(name)
        return func(*args, **(kwargs or {}))

    @property
    def count(self) -> int:
        return len(self.names)


def _boolean_index(args: tuple[Any, ...]) -> bool:
    index = args[1] if len(args) > 1 else None
    items = index if isinstance(index, tuple) else (index,)
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in items)


def _load_malloc_trim() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None  # not glibc (musl has no malloc_trim)


_MALLOC_TRIM = _load_malloc_trim()


def return_freed_memory() -> None:
    """Give the pages the C allocator holds free back to the OS (glibc's ``malloc_trim``,
    elsewhere nothing). Decoding and encoding an upload, or a phase of a print's steps,
    frees tens to hundreds of megabytes in the malloc arena of whichever thread did it;
    freed pages between live allocations stay in the process (all the more under
    ``atelier serve``'s malloc tuning), so the RSS would stay near the peak."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)
