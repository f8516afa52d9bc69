"""The Triton dispatch table holds only kernels a committed GPU check measured faster."""

from __future__ import annotations

import json
from pathlib import Path

from norms.kernels import dispatch

REPO = Path(__file__).resolve().parents[2]


def test_triton_every_enabled_kernel_is_backed_by_a_committed_gpu_result():
    assert dispatch.unbacked_entries(dispatch.MEASURED_WINS, REPO) == []


def test_triton_an_entry_without_a_measured_win_is_unbacked(tmp_path):
    result = {"norms": {"wins": {"rms_norm/rows": True, "adain/nchw": False}}}
    (tmp_path / "run.json").write_text(json.dumps(result))
    table = {
        "rms_norm/rows": "run.json",  # measured faster: backed
        "adain/nchw": "run.json",  # measured slower
        "group_norm/channels_last": "run.json",  # not measured there
        "ada_layer_norm/rows": "missing.json",
        "made_up/rows": "run.json",  # not a kernel
    }
    assert dispatch.unbacked_entries(table, tmp_path) == [
        "adain/nchw",
        "group_norm/channels_last",
        "ada_layer_norm/rows",
        "made_up/rows",
    ]
