"""Realtime's working-scale passes on other CPU back ends: torch.compile and ONNX Runtime (an experiment).

Times the two fixed networks the realtime preset runs at its working scale, each one
encoder pass to the level and the level's decoder (relu3_1 and relu2_1), on a
``1 x 3 x 128 x 96`` input (a 512 x 384 photo at the 128 px working side), in three
ways:

- ``eager``: the model's fast path (float32 here, channels_last), as the preset runs it;
- ``compiled``: the same modules through ``torch.compile`` (Inductor, default mode);
- ``onnxruntime``: exported with ``torch.onnx.export(dynamo=True)`` and run by ONNX
  Runtime's CPU provider, 2 intra-op threads, spinning off (so its idle threads do not
  slow the other blocks).

Each round runs a block of 20 calls per back end, the order rotating; the median of
all rounds is printed, with the largest difference to eager's output and the one-off
cost (compilation or export plus session creation).

Needs ``pip install onnx onnxscript`` (not project dependencies).

Usage:
    ATELIER_WEIGHTS_DIR=../shared/weights python benchmarks/adain_backends.py
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path

import onnxruntime
import torch

from models.adain import StyleTransfer

REPO = Path(__file__).resolve().parent.parent
ROUNDS, CALLS = 3, 20


class LevelPass(torch.nn.Module):
    """``decoder_l(encoder_l(x))``: one realtime working-scale pass without the AdaIN."""

    def __init__(self, model: StyleTransfer, level: str) -> None:
        super().__init__()
        self.encoder, self.decoder, self.level = model.encoder, model.decoders[level], level

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.encoder.encode(image, self.level))


def onnx_runner(network: torch.nn.Module, image: torch.Tensor, threads: int):
    path = Path(tempfile.mkdtemp()) / "pass.onnx"
    torch.onnx.export(network, (image,), str(path), dynamo=True)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    return lambda x: torch.from_numpy(session.run(None, {name: x.contiguous().numpy()})[0])


def main() -> None:
    threads = 2
    torch.set_num_threads(threads)
    torch.set_grad_enabled(False)
    weights = Path(os.environ.get("ATELIER_WEIGHTS_DIR", REPO.parent / "shared" / "weights"))
    model = StyleTransfer.from_pretrained([weights], fast=True)
    model._ready()
    image = torch.rand(1, 3, 128, 96, generator=torch.Generator().manual_seed(0))
    image = image.contiguous(memory_format=torch.channels_last)
    print(f"torch {torch.__version__}, onnxruntime {onnxruntime.__version__}, {threads} threads")
    print(
        f"{'level':>8} {'back end':>12} {'ms/call':>8} {'x eager':>8} {'max diff':>9} {'one-off s':>10}"
    )
    for level in ("relu3_1", "relu2_1"):
        network = LevelPass(model, level).eval()
        reference = network(image)
        runners, one_off = {"eager": network}, {"eager": 0.0}
        start = time.perf_counter()
        compiled = torch.compile(network)
        compiled(image)
        runners["compiled"], one_off["compiled"] = compiled, time.perf_counter() - start
        start = time.perf_counter()
        runners["onnxruntime"] = onnx_runner(network, image, threads)
        runners["onnxruntime"](image)
        one_off["onnxruntime"] = time.perf_counter() - start
        times: dict[str, list[float]] = {name: [] for name in runners}
        names = list(runners)
        for round_index in range(ROUNDS):
            for name in names[round_index:] + names[:round_index]:
                for _ in range(CALLS):
                    start = time.perf_counter()
                    runners[name](image)
                    times[name].append(time.perf_counter() - start)
                time.sleep(0.5)
        eager = statistics.median(times["eager"])
        for name in names:
            median = statistics.median(times[name])
            difference = float((runners[name](image) - reference).abs().max())
            print(
                f"{level:>8} {name:>12} {1000 * median:8.1f} {median / eager:8.2f} "
                f"{difference:9.1e} {one_off[name]:10.1f}"
            )


if __name__ == "__main__":
    main()
