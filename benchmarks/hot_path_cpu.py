"""The CPU hot paths of this tree against another commit's, side by side in one run.

A change made for the GPU (batched guidance, device generators, the decoder's affine
without host reads, ...) must not slow the CPU. This script extracts the baseline's
``norms`` and ``models`` (``git archive``) into a temporary folder and starts one worker
process per tree (the baseline's through ``PYTHONPATH``); both load the same weights and
run the same workloads on the same inputs. Each round runs every workload on both
trees, one after the other, in an order that alternates from round to round; round 0
is the warm-up, whose outputs are compared (the largest absolute difference between the
trees' outputs). The table gives the median ms per call of each side and their ratio
(this tree / baseline; below 1 is faster).

Workloads (speed only, fixed random inputs):
- ``dit b1`` / ``dit b4``: ``TextToImage.generate`` with the repository's checkpoint,
  1 or 4 prompts, 10 DDPM steps, guidance 4 (the service's defaults but the steps);
- ``dit guided call b8``: one call of the guided denoiser (guidance 4) on the regions of
  8 prompts (14 regions), the unit a sampler step repeats;
- ``adain quality 256 b2``: ``StyleTransfer(fast=True)``, preset ``quality``, two 256 px
  photos, one style;
- ``adain realtime 512 b1``: preset ``realtime``, one 512 px photo.

Usage:
    ATELIER_WEIGHTS_DIR=../shared/weights python benchmarks/hot_path_cpu.py \\
        --baseline cecfdfe [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WORKLOADS = (
    "dit b1",
    "dit b4",
    "dit guided call b8",
    "adain quality 256 b2",
    "adain realtime 512 b1",
)
PROMPTS = [
    "a red circle to the left of a blue square",
    "a green triangle",
    "two yellow squares",
    "a blue circle above a red triangle",
]


# ---------------------------------------------------------------------- worker side
def _worker() -> None:
    """Load the models of whichever tree is first on the path; answer timing requests
    (one JSON line in: ``{"workload", "calls"}``; one out: the seconds of each call).
    Anything the models print goes to stderr, so stdout carries the answers alone."""
    answers, sys.stdout = sys.stdout, sys.stderr
    import torch

    import models
    from models.adain import StyleTransfer
    from models.diffusion import classifier_free_guidance
    from models.dit.pipeline import TextToImage

    weights = [Path(os.environ["ATELIER_WEIGHTS_DIR"])]
    dit = TextToImage.from_checkpoint(REPO / "weights" / "dit-shapes32.safetensors")
    adain = StyleTransfer.from_pretrained(weights, fast=True)
    gen = torch.Generator().manual_seed(0)
    photos = {size: torch.rand(2, 3, size, size, generator=gen) for size in (256, 512)}
    style = torch.rand(1, 3, 256, 256, generator=gen)
    regions = dit.regions(PROMPTS * 2, [None] * 8, list(range(8)), plan_layout=True)
    rows = regions.owner.numel()
    region_x, region_t = torch.randn(rows, 3, 32, 32, generator=gen), torch.full((rows,), 500)
    guided = classifier_free_guidance(dit.denoiser, 4.0)

    def guided_call():
        with torch.inference_mode():
            return guided(region_x, region_t, regions.cond)

    runs = {
        "dit guided call b8": guided_call,
        "dit b1": lambda: dit.generate(PROMPTS[:1], seeds=[0], steps=10),
        "dit b4": lambda: dit.generate(PROMPTS, seeds=[0, 1, 2, 3], steps=10),
        "adain quality 256 b2": lambda: adain.stylize(photos[256], [style], preset="quality"),
        "adain realtime 512 b1": lambda: adain.stylize(photos[512][:1], [style], preset="realtime"),
    }
    print(json.dumps({"ready": str(Path(models.__file__).parent)}), file=answers, flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        times = []
        for _ in range(request["calls"]):
            start = time.perf_counter()
            output = runs[request["workload"]]()
            times.append(time.perf_counter() - start)
        if request.get("save"):
            torch.save(output, request["save"])
        print(json.dumps(times), file=answers, flush=True)


# ---------------------------------------------------------------------- parent side
class Worker:
    """One worker process running the models of ``tree`` (``None``: this checkout)."""

    def __init__(self, name: str, tree: Path | None) -> None:
        env = dict(os.environ)
        if tree is not None:
            env["PYTHONPATH"] = os.pathsep.join([str(tree), env.get("PYTHONPATH", "")])
        self.name = name
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.models_dir = json.loads(self.process.stdout.readline())["ready"]

    def run(self, workload: str, calls: int, save: Path | None = None) -> list[float]:
        request = {"workload": workload, "calls": calls, "save": save and str(save)}
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        return json.loads(self.process.stdout.readline())

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait()


def extract(ref: str, into: Path) -> Path:
    """``norms``, ``models`` and the weights manifest of commit ``ref`` under ``into``."""
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", ref, "norms", "models", "weights/manifest.json"],
        capture_output=True,
        check=True,
    ).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", default="main", help="commit to compare against")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds after the warm-up")
    parser.add_argument("--calls", type=int, default=2, help="calls per workload per round")
    parser.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=WORKLOADS)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        _worker()
        return
    if "ATELIER_WEIGHTS_DIR" not in os.environ:
        raise SystemExit("set ATELIER_WEIGHTS_DIR to the folder of the shared VGG weights")
    import torch

    with tempfile.TemporaryDirectory() as folder:
        sides = [
            Worker("this tree", None),
            Worker(f"baseline {args.baseline}", extract(args.baseline, Path(folder) / "tree")),
        ]
        try:
            times = {(w.name, load): [] for w in sides for load in args.workloads}
            differences = {}
            for round_ in range(args.rounds + 1):
                order = sides if round_ % 2 == 0 else sides[::-1]
                for index, workload in enumerate(args.workloads):
                    for side, worker in enumerate(order):
                        save = Path(folder) / f"{index}-{side}.pt" if round_ == 0 else None
                        result = worker.run(workload, args.calls, save)
                        if round_ > 0:
                            times[(worker.name, workload)] += result
                    if round_ == 0:  # the warm-up's outputs: how far apart the trees are
                        first, second = (
                            torch.load(Path(folder) / f"{index}-{i}.pt") for i in (0, 1)
                        )
                        differences[workload] = float((first - second).abs().max())
        finally:
            for worker in sides:
                worker.close()
    ours, base = sides[0].name, sides[1].name
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, ", end="")
    print(f"{args.rounds} rounds x {args.calls} calls, medians, load average ", end="")
    print(f"{os.getloadavg()[0]:.1f}; models from:")
    for worker in sides:
        print(f"  {worker.name}: {worker.models_dir}")
    print("\n| workload | this tree ms | baseline ms | this / baseline | max output difference |")
    print("|---|---|---|---|---|")
    for workload in args.workloads:
        a = statistics.median(times[(ours, workload)]) * 1e3
        b = statistics.median(times[(base, workload)]) * 1e3
        print(f"| {workload} | {a:.0f} | {b:.0f} | {a / b:.3f} | {differences[workload]:.2g} |")


if __name__ == "__main__":
    main()
