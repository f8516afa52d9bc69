"""Which Triton kernel serves a call: on CUDA, and only where one was measured faster.

The rule is a table, :data:`MEASURED_WINS`: a kernel name (``"<kernel>/<layout>"``)
enters it only with the ``benchmarks/results/*.json`` file of a ``benchmarks/gpu_check.py``
run in which that kernel beat torch eager on every shape listed for it (its
``norms.kernels[*].wins`` is true). ``tests/norms/test_triton_dispatch.py`` checks every
entry against its file. The first GPU run (an H200, ``benchmarks/results/2026-12-04-h200-
run1.json``) measured five kernels faster than eager in isolation, but the product with
them dispatched (``run4.json``) showed no clear gain over the product without
(``run3.json``), so the table is empty and every call runs torch's kernels or the float32 composites, as on the CPU.

To enable a kernel after a GPU run: commit its JSON under ``benchmarks/results/`` and
add ``name: "benchmarks/results/<file>.json"`` here. A win holds for the card it was
measured on; other cards are assumed alike until measured.
"""

from __future__ import annotations

import functools
import importlib.util
import json
from collections.abc import Mapping
from pathlib import Path

from torch import Tensor

#: Every kernel name the GPU check measures, ``"<kernel>/<layout>"``.
KERNELS = (
    "ada_layer_norm/rows",
    "rms_norm/rows",
    "adain/nchw",
    "adain/channels_last",
    "instance_norm/channels_last",
    "group_norm/channels_last",
)

#: Kernel name -> the committed GPU-check result that shows it faster than torch eager.
MEASURED_WINS: dict[str, str] = {}


@functools.cache
def triton_available() -> bool:
    """Whether the ``triton`` package can be imported (it ships with CUDA builds of torch)."""
    return importlib.util.find_spec("triton") is not None


def layout(x: Tensor) -> str:
    """``"channels_last"`` for a 4-d channels_last tensor (C > 1), else ``"nchw"``."""
    if x.dim() == 4 and x.shape[1] > 1 and x.stride(1) == 1 and not x.is_contiguous():
        return "channels_last"
    return "nchw"


def chosen(name: str, x: Tensor) -> bool:
    """Whether the kernel ``name`` should serve a call on ``x``: ``x`` is on CUDA, the
    kernel is in :data:`MEASURED_WINS` and Triton is installed."""
    return x.is_cuda and name in MEASURED_WINS and triton_available()


def unbacked_entries(table: Mapping[str, str], root: Path) -> list[str]:
    """The entries of ``table`` (like :data:`MEASURED_WINS`) that their result file, under
    ``root`` (the repository), does not back: an unknown kernel name, a missing file, or a
    file whose ``norms.wins`` does not say true for the name."""
    unbacked = []
    for name, file in table.items():
        path = root / file
        wins = (
            json.loads(path.read_text()).get("norms", {}).get("wins", {}) if path.is_file() else {}
        )
        if name not in KERNELS or wins.get(name) is not True:
            unbacked.append(name)
    return unbacked
